//! Why a template was refused or failed: the one error type of the parser and the executor.

use crate::budget::Exceeded;

/// Why a template was refused. Messages follow Go's (`template: <name>:<line>:<col>: ...`), so
/// an ESO user recognises them; they name the template and the position, never data values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("template: {name}:{line}:{column}: {message}")]
    Parse {
        name: String,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("template: {name}:{line}:{column}: executing \"{template}\" at <{context}>: {message}")]
    Exec {
        name: String,
        /// The template being executed: `name` itself, or a `define`d one it called.
        template: String,
        line: usize,
        column: usize,
        /// The action's source text, as Go quotes it.
        context: String,
        message: String,
    },
    #[error("template: {name}: output exceeds {limit} bytes")]
    TooLarge { name: String, limit: usize },
    /// The render ran out of its [`Budget`], at the action named.
    #[error(
        "template: {name}:{line}:{column}: executing \"{template}\" at <{context}>: {exceeded}"
    )]
    OverBudget {
        name: String,
        template: String,
        line: usize,
        column: usize,
        context: String,
        /// Boxed: it is rare, and every `Result` of the executor would carry its size.
        exceeded: Box<Exceeded>,
    },
}
