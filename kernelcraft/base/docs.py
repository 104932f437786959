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

    id: int = Field(description="Section id; pass it to get_section for the whole text.")
    title: str = Field(description="The manual's title.")
    heading_path: str = Field(description="Title and headings down to this section, joined with ' > '.")
    file: str = Field(description="The manual's file name in kernelcraft/hw_docs/.")
    arch: str = Field(
        description="The target(s) the section concerns (sm_80, sm_90a, gfx942, ...), or 'any'."
    )
    snippet: str = Field(
        description="The start of the section (search results) or its whole body (get_section)."
    )
    score: float = Field(default=0.0, description="Relevance to the query; higher is better.")
    sources: list[str] = Field(default_factory=list, description="Where the manual's facts come from.")


class IndexReport(BaseModel):
    indexed: list[str] = Field(default_factory=list, description="Files (re)indexed.")
    unchanged: list[str] = Field(default_factory=list)
    removed: list[str] = Field(default_factory=list)
    sections: int = 0
