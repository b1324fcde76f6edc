//! The functions the shim writes into a Go plugin's module, one per
//! [`Stub`]: each is the whole behaviour of a preview1 import (see the table
//! in [`super`]), in Wasm, over the module's own memory and the shim's
//! globals ([`Shared`]).

use wasm_encoder::{BlockType, Function, Instruction, MemArg, ValType};

/// The SDK's line buffer: longer lines are logged in pieces of this size.
pub const LINE_BYTES: u32 = 1024;
/// `log`'s levels (`wit/plugin.wit`, `enum level`).
pub(super) const LEVEL_INFO: i32 = 2;
pub(super) const LEVEL_WARN: i32 = 3;
pub(super) const LEVEL_ERROR: i32 = 4;
/// preview1 errno values.
pub(super) const EBADF: i32 = 8;
pub(super) const ENOSYS: i32 = 52;
/// How far the virtual clock moves per reading, in nanoseconds: time
/// passes, so the runtime's timers and `time.Since` behave, and every call
/// sees the same times (plugins read the request's `now`).
pub(super) const CLOCK_TICK_NS: i64 = 1_000;

/// What the shim does for one preview1 function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stub {
    FdWrite,
    ProcExit,
    ClockTimeGet,
    PollOneoff,
    /// Write two zero `u32`s (no arguments, no environment).
    SizesZero,
    /// Return this errno.
    Errno(i32),
    /// Register the SDK's line buffer (`kubeplug:go-shim line-buffer`).
    LineBuffer,
    /// Log the buffered line (`kubeplug:go-shim flush`).
    Flush,
}

pub(super) fn mem(offset: u64, align: u32) -> MemArg {
    MemArg {
        offset,
        align,
        memory_index: 0,
    }
}

/// What the shim's functions use: the log import and the shim's globals.
#[derive(Debug, Clone, Copy)]
pub(super) struct Shared {
    /// The log import.
    pub(super) log: u32,
    /// The virtual clock (i64, nanoseconds).
    pub(super) clock: u32,
    /// The line buffer the SDK registered (0: none yet), the bytes in it,
    /// and the fd they came from.
    pub(super) line_ptr: u32,
    pub(super) line_len: u32,
    pub(super) line_fd: u32,
}

/// Push the level a line of `fd` at `ptr` of `len` bytes is logged at:
/// stdout's info; stderr's warn, but error for the Go runtime's own report
/// of a panic or a fatal error (`panic: `, `fatal error: `), so that the
/// host's trap report, which carries the last error line, names the reason
/// rather than the traceback's last frame.
fn level(f: &mut Function, fd: &Instruction<'_>, ptr: &Instruction<'_>, len: &Instruction<'_>) {
    use Instruction as I;
    // Whether the line's first 8 bytes, masked, are `word` (an unaligned
    // load; 0 for a shorter line).
    let starts = |f: &mut Function, word: &[u8; 8], mask: i64| {
        f.instruction(len)
            .instruction(&I::I32Const(8))
            .instruction(&I::I32GeU)
            .instruction(&I::If(BlockType::Result(ValType::I32)))
            .instruction(ptr)
            .instruction(&I::I64Load(mem(0, 0)))
            .instruction(&I::I64Const(mask))
            .instruction(&I::I64And)
            .instruction(&I::I64Const(i64::from_le_bytes(*word)))
            .instruction(&I::I64Eq)
            .instruction(&I::Else)
            .instruction(&I::I32Const(0))
            .instruction(&I::End);
    };
    f.instruction(&I::I32Const(LEVEL_ERROR))
        .instruction(&I::I32Const(LEVEL_WARN));
    starts(f, b"fatal er", -1);
    starts(f, b"panic: \0", 0x00ff_ffff_ffff_ffff);
    f.instruction(&I::I32Or)
        .instruction(&I::Select)
        .instruction(&I::I32Const(LEVEL_INFO))
        .instruction(fd)
        .instruction(&I::I32Const(2))
        .instruction(&I::I32Eq)
        .instruction(&I::Select);
}

/// Log the buffered line, if any, at its level, and empty it.
fn flush(f: &mut Function, g: Shared) {
    use Instruction as I;
    f.instruction(&I::GlobalGet(g.line_len))
        .instruction(&I::If(BlockType::Empty));
    level(
        f,
        &I::GlobalGet(g.line_fd),
        &I::GlobalGet(g.line_ptr),
        &I::GlobalGet(g.line_len),
    );
    f.instruction(&I::GlobalGet(g.line_ptr))
        .instruction(&I::GlobalGet(g.line_len))
        .instruction(&I::I32Const(0))
        .instruction(&I::I32Const(0))
        .instruction(&I::Call(g.log))
        .instruction(&I::I32Const(0))
        .instruction(&I::GlobalSet(g.line_len))
        .instruction(&I::End);
}

/// The body of the shim function `stub`, which has `params` parameters.
pub(super) fn body(stub: Stub, params: u32, g: Shared) -> Function {
    use Instruction as I;
    let mut f = match stub {
        Stub::LineBuffer => {
            // (ptr): the SDK's buffer of LINE_BYTES bytes, for good.
            let mut f = Function::new([]);
            f.instruction(&I::LocalGet(0))
                .instruction(&I::GlobalSet(g.line_ptr));
            f
        }
        Stub::Flush => {
            let mut f = Function::new([]);
            flush(&mut f, g);
            f
        }
        Stub::Errno(errno) => {
            let mut f = Function::new([]);
            f.instruction(&I::I32Const(errno));
            f
        }
        Stub::ProcExit => {
            let mut f = Function::new([]);
            flush(&mut f, g);
            f.instruction(&I::Unreachable);
            f
        }
        Stub::SizesZero => {
            let mut f = Function::new([]);
            for ptr in 0..2 {
                f.instruction(&I::LocalGet(ptr))
                    .instruction(&I::I32Const(0))
                    .instruction(&I::I32Store(mem(0, 2)));
            }
            f.instruction(&I::I32Const(0));
            f
        }
        Stub::ClockTimeGet => {
            // (id, precision, out): *out = clock += tick.
            let mut f = Function::new([]);
            f.instruction(&I::LocalGet(2))
                .instruction(&I::GlobalGet(g.clock))
                .instruction(&I::I64Const(CLOCK_TICK_NS))
                .instruction(&I::I64Add)
                .instruction(&I::GlobalSet(g.clock))
                .instruction(&I::GlobalGet(g.clock))
                .instruction(&I::I64Store(mem(0, 3)))
                .instruction(&I::I32Const(0));
            f
        }
        Stub::FdWrite => fd_write(params, g),
        Stub::PollOneoff => poll_oneoff(params, g),
    };
    f.instruction(&I::End);
    f
}

/// `for (; counter < limit; counter++) { body }`, with `counter` and
/// `limit` locals.
fn counted_loop(f: &mut Function, counter: u32, limit: u32, body: impl FnOnce(&mut Function)) {
    use Instruction as I;
    f.instruction(&I::Block(BlockType::Empty))
        .instruction(&I::Loop(BlockType::Empty))
        .instruction(&I::LocalGet(counter))
        .instruction(&I::LocalGet(limit))
        .instruction(&I::I32GeU)
        .instruction(&I::BrIf(1));
    body(f);
    f.instruction(&I::LocalGet(counter))
        .instruction(&I::I32Const(1))
        .instruction(&I::I32Add)
        .instruction(&I::LocalSet(counter))
        .instruction(&I::Br(0))
        .instruction(&I::End)
        .instruction(&I::End);
}

/// `fd_write(fd, iovs, iovs_len, nwritten)`: stdout and stderr reach the
/// plugin's log a line at a time; any other descriptor is EBADF.
fn fd_write(params: u32, g: Shared) -> Function {
    use Instruction as I;
    let (fd, iovs, iovs_len, nwritten) = (0, 1, 2, 3);
    // Locals: i, total, len, buf, j, byte.
    let (i, total, len, buf, j, byte) = (
        params,
        params + 1,
        params + 2,
        params + 3,
        params + 4,
        params + 5,
    );
    let mut f = Function::new([(6, ValType::I32)]);
    // Only stdout and stderr exist; a line of one is flushed before the
    // other's first byte.
    f.instruction(&I::LocalGet(fd))
        .instruction(&I::I32Const(1))
        .instruction(&I::I32Ne)
        .instruction(&I::LocalGet(fd))
        .instruction(&I::I32Const(2))
        .instruction(&I::I32Ne)
        .instruction(&I::I32And)
        .instruction(&I::If(BlockType::Empty))
        .instruction(&I::I32Const(EBADF))
        .instruction(&I::Return)
        .instruction(&I::End)
        .instruction(&I::GlobalGet(g.line_fd))
        .instruction(&I::LocalGet(fd))
        .instruction(&I::I32Ne)
        .instruction(&I::If(BlockType::Empty));
    flush(&mut f, g);
    f.instruction(&I::End)
        .instruction(&I::LocalGet(fd))
        .instruction(&I::GlobalSet(g.line_fd));
    // For each iovec (buf, len).
    counted_loop(&mut f, i, iovs_len, |f| {
        f.instruction(&I::LocalGet(iovs))
            .instruction(&I::LocalGet(i))
            .instruction(&I::I32Const(8))
            .instruction(&I::I32Mul)
            .instruction(&I::I32Add)
            .instruction(&I::LocalTee(buf))
            .instruction(&I::I32Load(mem(4, 2)))
            .instruction(&I::LocalSet(len))
            .instruction(&I::LocalGet(buf))
            .instruction(&I::I32Load(mem(0, 2)))
            .instruction(&I::LocalSet(buf))
            .instruction(&I::LocalGet(total))
            .instruction(&I::LocalGet(len))
            .instruction(&I::I32Add)
            .instruction(&I::LocalSet(total))
            .instruction(&I::I32Const(0))
            .instruction(&I::LocalSet(j))
            // No buffer registered yet (the runtime's own start-up): the
            // whole buffer is one line.
            .instruction(&I::GlobalGet(g.line_ptr))
            .instruction(&I::I32Eqz)
            .instruction(&I::If(BlockType::Empty))
            .instruction(&I::LocalGet(len))
            .instruction(&I::If(BlockType::Empty));
        level(f, &I::LocalGet(fd), &I::LocalGet(buf), &I::LocalGet(len));
        f.instruction(&I::LocalGet(buf))
            .instruction(&I::LocalGet(len))
            .instruction(&I::I32Const(0))
            .instruction(&I::I32Const(0))
            .instruction(&I::Call(g.log))
            .instruction(&I::End)
            .instruction(&I::LocalGet(len))
            .instruction(&I::LocalSet(j))
            .instruction(&I::End);
        counted_loop(f, j, len, |f| append_byte(f, g, buf, j, byte));
    });
    f.instruction(&I::LocalGet(nwritten))
        .instruction(&I::LocalGet(total))
        .instruction(&I::I32Store(mem(0, 2)))
        .instruction(&I::I32Const(0));
    f
}

/// One byte of `fd_write`'s buffer `buf` at `j` into the line: a newline
/// flushes the line, a full line is flushed before the byte goes in.
fn append_byte(f: &mut Function, g: Shared, buf: u32, j: u32, byte: u32) {
    use Instruction as I;
    f.instruction(&I::LocalGet(buf))
        .instruction(&I::LocalGet(j))
        .instruction(&I::I32Add)
        .instruction(&I::I32Load8U(mem(0, 0)))
        .instruction(&I::LocalTee(byte))
        .instruction(&I::I32Const(i32::from(b'\n')))
        .instruction(&I::I32Eq)
        .instruction(&I::If(BlockType::Empty));
    flush(f, g);
    // A full line is logged before the byte goes in, cut where a character
    // starts: in its last 4 bytes at a byte that is no UTF-8 continuation
    // (10xxxxxx), at its very end otherwise.
    f.instruction(&I::Else)
        .instruction(&I::GlobalGet(g.line_len))
        .instruction(&I::I32Const(LINE_BYTES as i32))
        .instruction(&I::I32GeU)
        .instruction(&I::GlobalGet(g.line_len))
        .instruction(&I::I32Const(LINE_BYTES as i32 - 4))
        .instruction(&I::I32GeU)
        .instruction(&I::LocalGet(byte))
        .instruction(&I::I32Const(0xc0))
        .instruction(&I::I32And)
        .instruction(&I::I32Const(0x80))
        .instruction(&I::I32Ne)
        .instruction(&I::I32And)
        .instruction(&I::I32Or)
        .instruction(&I::If(BlockType::Empty));
    flush(f, g);
    f.instruction(&I::End)
        .instruction(&I::GlobalGet(g.line_ptr))
        .instruction(&I::GlobalGet(g.line_len))
        .instruction(&I::I32Add)
        .instruction(&I::LocalGet(byte))
        .instruction(&I::I32Store8(mem(0, 0)))
        .instruction(&I::GlobalGet(g.line_len))
        .instruction(&I::I32Const(1))
        .instruction(&I::I32Add)
        .instruction(&I::GlobalSet(g.line_len))
        .instruction(&I::End);
}

/// `poll_oneoff(in, out, nsubscriptions, nevents)`: every subscription fires
/// at once; a clock moves the virtual clock to its deadline, a file gets
/// EBADF.
fn poll_oneoff(params: u32, g: Shared) -> Function {
    use Instruction as I;
    let clock = g.clock;
    // A subscription is 48 bytes (userdata u64 @0, tag u8 @8, clock: timeout
    // u64 @24, flags u16 @40); an event 32 (userdata u64 @0, error u16 @8,
    // type u8 @10, fd_readwrite @16). Locals: i, sub, event.
    let (input, out, n, nevents) = (0, 1, 2, 3);
    let (i, sub, event) = (params, params + 1, params + 2);
    let mut f = Function::new([(3, ValType::I32)]);
    counted_loop(&mut f, i, n, |f| {
        f.instruction(&I::LocalGet(input))
            .instruction(&I::LocalGet(i))
            .instruction(&I::I32Const(48))
            .instruction(&I::I32Mul)
            .instruction(&I::I32Add)
            .instruction(&I::LocalSet(sub))
            .instruction(&I::LocalGet(out))
            .instruction(&I::LocalGet(i))
            .instruction(&I::I32Const(32))
            .instruction(&I::I32Mul)
            .instruction(&I::I32Add)
            .instruction(&I::LocalSet(event));
        // event = {userdata, error 0, type = tag, zeroes}
        f.instruction(&I::LocalGet(event))
            .instruction(&I::LocalGet(sub))
            .instruction(&I::I64Load(mem(0, 3)))
            .instruction(&I::I64Store(mem(0, 3)));
        for offset in [8, 16, 24] {
            f.instruction(&I::LocalGet(event))
                .instruction(&I::I64Const(0))
                .instruction(&I::I64Store(mem(offset, 3)));
        }
        f.instruction(&I::LocalGet(event))
            .instruction(&I::LocalGet(sub))
            .instruction(&I::I32Load8U(mem(8, 0)))
            .instruction(&I::I32Store8(mem(10, 0)));
        // A clock fires now: move the clock to it (absolute) or by it.
        f.instruction(&I::LocalGet(sub))
            .instruction(&I::I32Load8U(mem(8, 0)))
            .instruction(&I::I32Eqz)
            .instruction(&I::If(BlockType::Empty))
            .instruction(&I::LocalGet(sub))
            .instruction(&I::I32Load16U(mem(40, 1)))
            .instruction(&I::I32Const(1))
            .instruction(&I::I32And)
            .instruction(&I::If(BlockType::Empty))
            .instruction(&I::LocalGet(sub))
            .instruction(&I::I64Load(mem(24, 3)))
            .instruction(&I::GlobalGet(clock))
            .instruction(&I::I64GtU)
            .instruction(&I::If(BlockType::Empty))
            .instruction(&I::LocalGet(sub))
            .instruction(&I::I64Load(mem(24, 3)))
            .instruction(&I::GlobalSet(clock))
            .instruction(&I::End)
            .instruction(&I::Else)
            .instruction(&I::GlobalGet(clock))
            .instruction(&I::LocalGet(sub))
            .instruction(&I::I64Load(mem(24, 3)))
            .instruction(&I::I64Add)
            .instruction(&I::GlobalSet(clock))
            .instruction(&I::End)
            .instruction(&I::Else)
            // fd_read / fd_write: there are no files.
            .instruction(&I::LocalGet(event))
            .instruction(&I::I32Const(EBADF))
            .instruction(&I::I32Store16(mem(8, 1)))
            .instruction(&I::End);
    });
    f.instruction(&I::LocalGet(nevents))
        .instruction(&I::LocalGet(n))
        .instruction(&I::I32Store(mem(0, 2)))
        .instruction(&I::I32Const(0));
    f
}
