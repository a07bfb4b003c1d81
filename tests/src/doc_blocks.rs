//! The fenced code blocks of the project's Markdown pages, by language and the heading they
//! sit under, with their text as a reader copies it (a fence indented in a list item gives
//! its lines without that indentation, as CommonMark does). The tests that build and run
//! what the docs tell users to type (`tests/tests/doc_snippets.rs`, the guide's Fortran
//! program in `tests/tests/capi.rs`) take it from here, so that a test checks the page as
//! it is and the page cannot drift from what works.

use std::path::{Path, PathBuf};

/// One fenced block of a page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// The info string's language, the part before any `,` (`rust,no_run` gives `rust`);
    /// empty for a fence without one.
    pub language: String,
    /// The whole info string (`rust,no_run`).
    pub info: String,
    /// The text of the nearest heading above the block, without its `#` marks.
    pub heading: String,
    /// The line of the opening fence, counted from 1.
    pub line: usize,
    /// The block's lines, each ending in a newline.
    pub text: String,
}

/// The repository's root.
pub fn repo_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    root.canonicalize().unwrap_or(root)
}

/// The fenced blocks of the page at `relative` (from the repository's root, e.g.
/// `docs/instrumenting-c.md`), in page order. Panics, naming it, if the page cannot be read.
pub fn page_blocks(relative: &str) -> Vec<Block> {
    let path = repo_root().join(relative);
    let page = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    blocks(&page)
}

/// The blocks of `page` in `language` under the heading `heading`, in page order.
pub fn blocks_under<'a>(
    blocks: &'a [Block],
    heading: &str,
    language: &str,
) -> impl Iterator<Item = &'a Block> {
    let (heading, language) = (heading.to_owned(), language.to_owned());
    blocks
        .iter()
        .filter(move |b| b.heading == heading && b.language == language)
}

/// The fenced blocks (three or more backticks) of a Markdown text, in order. A block left
/// open at the end of the text ends there.
pub fn blocks(markdown: &str) -> Vec<Block> {
    let mut found = Vec::new();
    let mut heading = String::new();
    let mut open: Option<(Block, usize, usize)> = None; // the block, its fence's indent and length
    for (number, line) in markdown.lines().enumerate() {
        let indent = line.len() - line.trim_start_matches(' ').len();
        let trimmed = &line[indent..];
        let fence = trimmed.len() - trimmed.trim_start_matches('`').len();
        match open.take() {
            Some((block, _, length))
                if fence >= length && trimmed[fence..].trim().is_empty() && indent < 4 =>
            {
                found.push(block);
            }
            Some((mut block, fence_indent, length)) => {
                // CommonMark: a line loses up to the opening fence's indentation.
                let strip = indent.min(fence_indent);
                block.text.push_str(&line[strip..]);
                block.text.push('\n');
                open = Some((block, fence_indent, length));
            }
            None if fence >= 3 && indent < 4 => {
                let info = trimmed[fence..].trim().to_owned();
                let language = info.split(',').next().unwrap_or_default().trim().to_owned();
                let block = Block {
                    language,
                    info,
                    heading: heading.clone(),
                    line: number + 1,
                    text: String::new(),
                };
                open = Some((block, indent, fence));
            }
            None => {
                if indent < 4 && trimmed.starts_with('#') {
                    let text = trimmed.trim_start_matches('#');
                    if text.is_empty() || text.starts_with(' ') {
                        heading = text.trim().to_owned();
                    }
                }
            }
        }
    }
    found.extend(open.map(|(block, _, _)| block));
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_headings_and_fences_then_each_block_has_its_language_heading_and_text() {
        let page = "# Title\n\n```sh\nmake\n```\n\n## Steps\n\n1. Do:\n   ```c\n   #include <x.h>\n     int a;\n   ```\n```rust,no_run\nfn main() {}\n\n```\n";
        let found = blocks(page);
        assert_eq!(found.len(), 3);
        assert_eq!(
            found[0],
            Block {
                language: "sh".into(),
                info: "sh".into(),
                heading: "Title".into(),
                line: 3,
                text: "make\n".into(),
            }
        );
        // `#include` inside a block is no heading; the list item's indentation is removed.
        assert_eq!(found[1].heading, "Steps");
        assert_eq!(found[1].text, "#include <x.h>\n  int a;\n");
        assert_eq!(found[2].language, "rust");
        assert_eq!(found[2].info, "rust,no_run");
        assert_eq!(found[2].heading, "Steps");
        assert_eq!(found[2].text, "fn main() {}\n\n");
    }

    #[test]
    fn given_a_longer_fence_then_shorter_backtick_lines_stay_inside() {
        let found = blocks("````md\n```c\nx\n```\n````\n");
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].text, "```c\nx\n```\n");
    }
}
