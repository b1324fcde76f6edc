//! The guest's allocator: small blocks in power-of-two size classes, bumped
//! out of chunks and kept on a free list per class; large ones from the
//! system allocator.
//!
//! Why: a call parses the request into JSON trees and builds the answer as
//! more of them, thousands of small allocations freed within the call, and
//! wasi-libc's dlmalloc spent about a third of `database`'s guest time in
//! `malloc` and `free` (docs/benchmarks.md, "The database guest against
//! native"). Each call runs in a fresh instance whose memory is discarded
//! after it, so the allocator need neither give memory back nor stay
//! unfragmented over a long life: a small block costs a list pop or a
//! pointer bump, its free a list push.
//!
//! The price: a block is rounded up to a power of two (at most twice its
//! size), and memory freed in one class is reused only by that class. A call
//! that peaks in several classes at different times holds the sum of the
//! peaks. Blocks over [`LARGE`] bytes (the request's texts, long answers) go
//! to the system allocator and are reused by it as before.
//!
//! Only Wasm builds install it (see the crate root); native builds of a
//! plugin (unit tests, `kubeplug-bench`'s native figure) keep the platform's
//! allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::ptr;

/// The smallest class, in bytes (room for the free list's pointer; a
/// multiple of [`ALIGN`], so that every block stays aligned).
const MIN: usize = 16;
/// Blocks larger than this come from the system allocator.
pub const LARGE: usize = 4 << 10;
/// Bytes taken from the system allocator at a time for small blocks.
const CHUNK: usize = 64 << 10;
/// Alignment of every small block (more than `std`'s types need; a layout
/// asking for more goes to the system allocator).
const ALIGN: usize = 16;
const CLASSES: usize = (LARGE.trailing_zeros() - MIN.trailing_zeros() + 1) as usize;

/// The allocator. Not thread-safe: a guest has one thread.
pub struct SizeClasses {
    state: UnsafeCell<State>,
}

struct State {
    /// Head of each class's list of freed blocks (each holds the next).
    free: [*mut u8; CLASSES],
    /// The unused part of the current chunk: where, and how many bytes.
    next: *mut u8,
    left: usize,
}

impl SizeClasses {
    /// An empty allocator: it takes its first chunk on the first small block.
    pub const fn new() -> Self {
        SizeClasses {
            state: UnsafeCell::new(State {
                free: [ptr::null_mut(); CLASSES],
                next: ptr::null_mut(),
                left: 0,
            }),
        }
    }
}

// SAFETY: single-threaded Wasm has one thread to reach it from; the crate
// root installs it only there.
#[cfg(all(target_arch = "wasm32", not(target_feature = "atomics")))]
#[allow(unsafe_code, reason = "the global allocator must be Sync")]
unsafe impl Sync for SizeClasses {}

impl Default for SizeClasses {
    fn default() -> Self {
        Self::new()
    }
}

/// The class of a layout, `None` for the system allocator's.
fn class(layout: Layout) -> Option<usize> {
    let size = layout.size().max(MIN);
    if size > LARGE || layout.align() > ALIGN {
        return None;
    }
    let bits = usize::BITS - (size - 1).leading_zeros();
    Some((bits - MIN.trailing_zeros()) as usize)
}

fn class_size(class: usize) -> usize {
    MIN << class
}

// SAFETY (all of it): `state` is only reached through `&self` on one
// thread (a guest has one; the global instance is registered only on
// single-threaded Wasm, see the crate root), and no method calls another
// while holding a reference into it, except `realloc` calling `alloc` and
// `dealloc` one after the other.
#[allow(unsafe_code, reason = "an allocator hands out raw memory")]
unsafe impl GlobalAlloc for SizeClasses {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let Some(class) = class(layout) else {
            // SAFETY: the caller's layout, passed on.
            return unsafe { System.alloc(layout) };
        };
        // SAFETY: see above; the reference ends with this call.
        let state = unsafe { &mut *self.state.get() };
        let head = state.free[class];
        if !head.is_null() {
            // SAFETY: a freed block of this class holds the next one.
            state.free[class] = unsafe { head.cast::<*mut u8>().read() };
            return head;
        }
        let size = class_size(class);
        if state.left < size {
            // A new chunk; the old one's tail (less than a block) is left.
            // SAFETY: a valid, non-zero layout.
            let chunk = unsafe { System.alloc(Layout::from_size_align_unchecked(CHUNK, ALIGN)) };
            if chunk.is_null() {
                return chunk;
            }
            state.next = chunk;
            state.left = CHUNK;
        }
        let block = state.next;
        // SAFETY: within the chunk (`size <= left`).
        state.next = unsafe { block.add(size) };
        state.left -= size;
        block
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if class(layout).is_none() {
            // SAFETY: the caller's layout, passed on.
            return unsafe { System.alloc_zeroed(layout) };
        }
        // SAFETY: the caller's layout; the block holds `layout.size()`.
        unsafe {
            let block = self.alloc(layout);
            if !block.is_null() {
                block.write_bytes(0, layout.size());
            }
            block
        }
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        let Some(class) = class(layout) else {
            // SAFETY: allocated by `System` with this layout.
            return unsafe { System.dealloc(block, layout) };
        };
        // SAFETY: see above; the block is ours and at least MIN bytes,
        // aligned for a pointer.
        unsafe {
            let state = &mut *self.state.get();
            block.cast::<*mut u8>().write(state.free[class]);
            state.free[class] = block;
        }
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `GlobalAlloc::realloc`'s contract: the new size rounded
        // to the alignment does not overflow.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        match (class(layout), class(new_layout)) {
            // SAFETY: allocated by `System` with `layout`.
            (None, None) => unsafe { System.realloc(block, layout, new_size) },
            (Some(old), Some(new)) if old == new => block,
            // SAFETY: a fresh block of `new_size` bytes; the old one holds
            // `layout.size()` and is freed once copied.
            _ => unsafe {
                let moved = self.alloc(new_layout);
                if !moved.is_null() {
                    ptr::copy_nonoverlapping(block, moved, layout.size().min(new_size));
                    self.dealloc(block, layout);
                }
                moved
            },
        }
    }
}

#[cfg(test)]
#[allow(unsafe_code, reason = "exercising the allocator")]
mod tests {
    use super::*;

    fn layout(size: usize, align: usize) -> Layout {
        Layout::from_size_align(size, align).unwrap()
    }

    #[test]
    fn classes_are_powers_of_two_up_to_large() {
        assert_eq!(class(layout(0, 1)), Some(0));
        assert_eq!(class(layout(16, 16)), Some(0));
        assert_eq!(class(layout(17, 1)), Some(1));
        assert_eq!(class(layout(32, 8)), Some(1));
        assert_eq!(class(layout(33, 4)), Some(2));
        assert_eq!(class(layout(LARGE, 8)), Some(CLASSES - 1));
        assert_eq!(class_size(CLASSES - 1), LARGE);
        assert_eq!(class(layout(LARGE + 1, 8)), None);
        assert_eq!(
            class(layout(8, 32)),
            None,
            "over-aligned goes to the system"
        );
    }

    #[test]
    fn blocks_are_aligned_distinct_and_reused_per_class() {
        let a = SizeClasses::new();
        unsafe {
            let small = layout(8, 8);
            let x = a.alloc(small);
            let y = a.alloc(small);
            let z = a.alloc(layout(24, 8));
            for p in [x, y, z] {
                assert!(!p.is_null());
                assert_eq!(p as usize % ALIGN, 0);
            }
            assert!(y as usize >= x as usize + MIN && z as usize >= y as usize + MIN);
            a.dealloc(x, small);
            assert_eq!(a.alloc(layout(5, 1)), x, "same class: the freed block");
            assert_ne!(a.alloc(layout(12, 4)), x);
            a.dealloc(z, layout(24, 8));
            assert_eq!(a.alloc(layout(32, 16)), z);
        }
    }

    #[test]
    fn memory_holds_what_was_written_across_reallocs_and_chunks() {
        let a = SizeClasses::new();
        unsafe {
            // More blocks than one chunk holds, each filled with its index.
            let mut blocks = Vec::new();
            for i in 0..2 * CHUNK / 64 {
                let size = 1 + i % 200;
                let p = a.alloc(layout(size, 1));
                p.write_bytes(i as u8, size);
                blocks.push((p, size, i as u8));
            }
            for (p, size, byte) in &blocks {
                assert!(
                    std::slice::from_raw_parts(*p, *size)
                        .iter()
                        .all(|b| b == byte)
                );
            }
            // Grow one block through the classes and past LARGE, and back.
            let mut p = a.alloc(layout(3, 1));
            p.copy_from(b"abc".as_ptr(), 3);
            let mut size = 3;
            for new_size in [7, 8, 100, 4000, LARGE, LARGE + 1, 3 * LARGE, 50, 2] {
                p = a.realloc(p, layout(size, 1), new_size);
                assert!(!p.is_null());
                assert_eq!(std::slice::from_raw_parts(p, 2), b"ab");
                size = new_size;
            }
            a.dealloc(p, layout(size, 1));
            let zeroed = a.alloc_zeroed(layout(64, 8));
            assert!(
                std::slice::from_raw_parts(zeroed, 64)
                    .iter()
                    .all(|b| *b == 0)
            );
            let big = a.alloc_zeroed(layout(LARGE * 2, 8));
            assert!(
                std::slice::from_raw_parts(big, LARGE * 2)
                    .iter()
                    .all(|b| *b == 0)
            );
            a.dealloc(big, layout(LARGE * 2, 8));
            for (p, size, _) in blocks {
                a.dealloc(p, layout(size, 1));
            }
        }
    }
}
