//! What the property tests share: a counting allocator that tells the peak of memory a
//! call added, and a proptest runner bounded by `PROPTEST_CASES` (256 when unset). A test
//! binary installs the allocator with
//! `#[global_allocator] static ALLOCATOR: peak::Counting = peak::Counting;`.
//! Used by `providers/tests/properties.rs` and `harness/tests/properties.rs`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::test_runner::{Config, TestRunner};

/// The system allocator, counting the bytes live now and the peak since the last reset.
pub struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

/// The tests of one binary share the counters: hold this while measuring.
pub static MEASURING: Mutex<()> = Mutex::new(());

/// Runs `f` and returns its result and the peak of memory it added, in bytes.
pub fn peak_of<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let out = f();
    (out, PEAK.load(Ordering::Relaxed).saturating_sub(base))
}

/// Inputs of the property tests are at most a few KiB; no parser may need more for one.
pub const PEAK_BOUND: usize = 16 * 1024 * 1024;

/// A proptest runner: `Config::default()` reads PROPTEST_CASES (256 cases when unset);
/// failures are not persisted to files.
pub fn runner() -> TestRunner {
    TestRunner::new(Config {
        failure_persistence: None,
        ..Config::default()
    })
}
