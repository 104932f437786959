"""Hardware-manual sections as clients see them (search results, get_section, the index report)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from kernelcraft.base.targets import TARGET_LIST


class SectionRef(BaseModel):
    """Where one section of a hardware manual is: enough to list it and fetch it."""

    id: int
    heading_path: str
    file: str
    arch: str


class DocSection(BaseModel):
    id: int = Field(description="As section_id: the whole text.")
    title: str = Field(description="The manual's title.")
    heading_path: str = Field(description="Title > headings > this one.")
    file: str = Field(description="In kernelcraft/hw_docs/.")
    arch: str = Field(description=f"Target(s), of {TARGET_LIST}, or 'any'.")
    snippet: str = Field(description="Its start, or all of it (by section_id).")
    score: float = 0.0
    sources: list[str] = Field(default_factory=list)


class IndexReport(BaseModel):
    indexed: list[str] = Field(default_factory=list, description="Files (re)indexed.")
    unchanged: list[str] = Field(default_factory=list)
    removed: list[str] = Field(default_factory=list)
    sections: int = 0


def section_markdown(section: DocSection) -> str:
    """A whole section as markdown: the MCP resource's body and `kernelcraft docs show`."""
    sources = "".join(f"\n- {s}" for s in section.sources)
    return (
        f"# {section.heading_path}\n\n"
        f"_File {section.file}; concerns {section.arch}._\n\n"
        f"{section.snippet.strip()}\n\n"
        f"Sources:{sources}\n"
    )
