//! Deep recursion on a growing stack, for the parser, the executor and `fromYaml`.

/// Runs `f` with stack to spare, on a new segment when the thread's runs low: template calls
/// and nesting recurse, and the caller may be a worker thread with a small stack.
pub(crate) fn with_stack<T>(f: impl FnOnce() -> T) -> T {
    const RED_ZONE: usize = 128 * 1024;
    const SEGMENT: usize = 2 * 1024 * 1024;
    stacker::maybe_grow(RED_ZONE, SEGMENT, f)
}
