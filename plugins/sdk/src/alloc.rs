//! The guest's allocator: blocks up to [`LARGE`] in power-of-two size
//! classes, bumped out of an arena the instance starts with (then out of
//! chunks) and kept on a free list per class; larger ones from the system
//! allocator.
//!
//! Why: a call parses the request into JSON trees and builds the answer as
//! more of them, thousands of small allocations freed within the call, and
//! wasi-libc's dlmalloc spent about a third of `database`'s guest time in
//! `malloc` and `free` (docs/benchmarks/runtime.md, "The database guest against
//! native"). Each call runs in a fresh instance whose memory is discarded
//! after it, so the allocator need neither give memory back nor stay
//! unfragmented over a long life: a block costs a list pop or a pointer
//! bump, its free a list push.
//!
//! Why an arena: a Rust guest's memory starts with just its stack and data,
//! so its first allocation grows memory, and under the host's pooling
//! allocator every grow costs two `mprotect`s with their TLB flushes (the
//! grow, and taking it back when the next instance starts in the slot): a
//! quarter of a small call's whole cost (docs/benchmarks/runtime.md, "Calls that
//! never grow memory"). The arena is a zeroed static, so the linker puts it
//! in the memory the instance starts with; its pages cost nothing until
//! written, and a call that stays within it never grows memory.
//!
//! The price: a block is rounded up to a power of two (at most twice its
//! size), and memory freed in one class is reused only by that class. A call
//! that peaks in several classes at different times holds the sum of the
//! peaks. Every instance starts [`ARENA`] bytes bigger (charged to the
//! plugin's memory quota like any memory). Blocks over [`LARGE`] bytes go
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
pub const LARGE: usize = 64 << 10;
/// The arena of the crate root's allocator, in bytes.
pub const ARENA: usize = 512 << 10;
/// Bytes taken from the system allocator at a time once the arena is used.
const CHUNK: usize = 256 << 10;
/// Alignment of every small block (more than `std`'s types need; a layout
/// asking for more goes to the system allocator).
const ALIGN: usize = 16;
const CLASSES: usize = (LARGE.trailing_zeros() - MIN.trailing_zeros() + 1) as usize;

/// The allocator, with an arena of `N` bytes. Not thread-safe: a guest has
/// one thread.
pub struct SizeClasses<const N: usize = ARENA> {
    state: UnsafeCell<State>,
    arena: Arena<N>,
}

/// Memory to bump blocks out of before any chunk is taken.
#[repr(C, align(16))]
struct Arena<const N: usize>(UnsafeCell<[u8; N]>);

struct State {
    /// Head of each class's list of freed blocks (each holds the next).
    free: [*mut u8; CLASSES],
    /// The unused part of the arena or the current chunk: where, and how
    /// many bytes.
    next: *mut u8,
    left: usize,
    /// Whether blocks were ever bumped out of the arena (after it, chunks).
    arena_used: bool,
}

impl<const N: usize> SizeClasses<N> {
    /// An empty allocator: the first block is bumped out of its arena.
    pub const fn new() -> Self {
        SizeClasses {
            state: UnsafeCell::new(State {
                free: [ptr::null_mut(); CLASSES],
                next: ptr::null_mut(),
                left: 0,
                arena_used: false,
            }),
            arena: Arena(UnsafeCell::new([0; N])),
        }
    }
}

// SAFETY: single-threaded Wasm has one thread to reach it from; the crate
// root installs it only there.
#[cfg(all(target_arch = "wasm32", not(target_feature = "atomics")))]
#[allow(unsafe_code, reason = "the global allocator must be Sync")]
unsafe impl<const N: usize> Sync for SizeClasses<N> {}

impl<const N: usize> Default for SizeClasses<N> {
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

impl State {
    /// Put what is left of the arena or chunk on the free lists, largest
    /// blocks first, before bumping out of another chunk.
    fn spill(&mut self) {
        while self.left >= MIN {
            let class =
                (usize::BITS - 1 - self.left.min(LARGE).leading_zeros() - MIN.trailing_zeros())
                    as usize;
            let block = self.next;
            // SAFETY: `block` starts `left` bytes we own, aligned to ALIGN
            // (every size taken is a multiple of it), and the class's size
            // is at most `left`.
            #[allow(unsafe_code, reason = "free-list links live in the blocks")]
            unsafe {
                block.cast::<*mut u8>().write(self.free[class]);
                self.next = block.add(class_size(class));
            }
            self.free[class] = block;
            self.left -= class_size(class);
        }
    }
}

// SAFETY (all of it): `state` is only reached through `&self` on one
// thread (a guest has one; the global instance is registered only on
// single-threaded Wasm, see the crate root), and no method calls another
// while holding a reference into it, except `realloc` calling `alloc` and
// `dealloc` one after the other.
#[allow(unsafe_code, reason = "an allocator hands out raw memory")]
unsafe impl<const N: usize> GlobalAlloc for SizeClasses<N> {
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
            let (next, left) = if !state.arena_used && size <= N {
                state.arena_used = true;
                (self.arena.0.get().cast(), N)
            } else {
                // SAFETY: a valid, non-zero layout.
                let chunk =
                    unsafe { System.alloc(Layout::from_size_align_unchecked(CHUNK, ALIGN)) };
                if chunk.is_null() {
                    return chunk;
                }
                (chunk, CHUNK)
            };
            // The old tail, as blocks of the classes it holds.
            state.spill();
            state.next = next;
            state.left = left;
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
        let a = SizeClasses::<0>::new();
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
        let a = SizeClasses::<0>::new();
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

    #[test]
    fn the_arena_comes_first_then_chunks_and_its_tail_is_reused() {
        const N: usize = 4096;
        let a = Box::new(SizeClasses::<N>::new());
        let within = |p: *mut u8, arena: &SizeClasses<N>| {
            let start = arena.arena.0.get() as usize;
            (start..start + N).contains(&(p as usize))
        };
        unsafe {
            // 4096 = 3 * 1024 + 512 + 256 + 256: the arena holds these.
            let blocks: Vec<_> = [1000, 1000, 1000, 500, 200, 256]
                .iter()
                .map(|&n| (a.alloc(layout(n, 8)), n))
                .collect();
            assert!(blocks.iter().all(|(p, _)| within(*p, &a)), "from the arena");
            // Full: the next block comes from a chunk.
            let outside = a.alloc(layout(16, 8));
            assert!(!outside.is_null() && !within(outside, &a));
            for (p, n) in blocks {
                a.dealloc(p, layout(n, 8));
            }
            // A partly used arena's tail goes on the free lists when a
            // block does not fit in it.
            let b = Box::new(SizeClasses::<N>::new());
            let arena = b.arena.0.get() as usize;
            let first = b.alloc(layout(2048, 8));
            assert_eq!(first as usize, arena);
            let big = b.alloc(layout(LARGE, 8));
            assert!(!big.is_null());
            // The 2 KiB left became one block of the 2 KiB class.
            let tail = b.alloc(layout(2000, 8));
            assert_eq!(tail as usize, arena + 2048, "the arena's tail, spilled");
            let next = b.alloc(layout(2000, 8));
            assert!(!within(next, &b), "the tail was one block");
        }
    }
}
