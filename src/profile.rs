//! The heap profile of feature `dhat-heap`: every allocation recorded from the start, written
//! to `dhat-heap-<pid>.json` when the stop signal comes, so that its "at the end" figures are
//! the heap of the running operator rather than of one torn down.

use std::sync::Mutex;

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

static PROFILER: Mutex<Option<dhat::Profiler>> = Mutex::new(None);

pub fn start() {
    // Whole backtraces: an allocation's first frames are all serde's or the collections'.
    let profiler = dhat::Profiler::builder()
        .file_name(format!("dhat-heap-{}.json", std::process::id()))
        .trim_backtraces(None)
        .build();
    *PROFILER.lock().expect("profiler poisoned") = Some(profiler);
}

pub fn write() {
    drop(PROFILER.lock().expect("profiler poisoned").take());
}
