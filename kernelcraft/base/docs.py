"""Hardware-manual sections as clients see them (search results, get_section, the index report)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class SectionRef(BaseModel):
    """Where one section of a hardware manual is: enough to list it and fetch it."""

    id: int
    heading_path: str
    file: str
    arch: str


class DocSection(BaseModel):
    """One section of a hardware manual."""

    id: int = Field(description="Pass it as section_id for the whole text.")
    title: str = Field(description="The manual's title.")
    heading_path: str = Field(description="Title > headings down to this section.")
    file: str = Field(description="File in kernelcraft/hw_docs/.")
    arch: str = Field(description="Its target(s) (sm_80, sm_90a, gfx942, ...) or 'any'.")
    snippet: str = Field(description="Its start (search) or whole body (by section_id).")
    score: float = Field(default=0.0, description="Relevance (higher: better).")
    sources: list[str] = Field(default_factory=list, description="The manual's sources.")


class IndexReport(BaseModel):
    indexed: list[str] = Field(default_factory=list, description="Files (re)indexed.")
    unchanged: list[str] = Field(default_factory=list)
    removed: list[str] = Field(default_factory=list)
    sections: int = 0
