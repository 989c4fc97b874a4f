//! A place in a text file, for errors and plans that point into it.

use std::fmt;

use serde::Serialize;

/// A place in a text file (a desired-state file, `hook.toml`): one-based line and column (in
/// characters).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Location {
    /// The line, from 1.
    pub line: usize,
    /// The column, from 1.
    pub column: usize,
}

impl Location {
    /// The location of byte `offset` in `text` (the end of the text when past it).
    pub fn of_offset(text: &str, offset: usize) -> Location {
        let mut line = 1;
        let mut column = 1;
        for (at, c) in text.char_indices() {
            if at >= offset {
                break;
            }
            if c == '\n' {
                line += 1;
                column = 1;
            } else {
                column += 1;
            }
        }
        Location { line, column }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}
