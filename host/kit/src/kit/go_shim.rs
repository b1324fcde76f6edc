//! Go plugins as components: the `wasi_snapshot_preview1` shim and the
//! composing step (`kubeplug __componentize-go`, which the Go SDK's `build`
//! runs on the core module `go build` makes).
//!
//! The standard Go toolchain (`GOOS=wasip1 GOARCH=wasm -buildmode=c-shared`)
//! makes a core module whose runtime imports a handful of preview1
//! functions. Rather than linking the standard WASI adapter (which traps
//! during Go's start-up) or giving Go plugins WASI, [`shim`] replaces each
//! of those imports with a small function written here, in the module
//! itself, so that the component imports nothing but `kubeplug:plugin/*`:
//!
//! | preview1 function                        | the shim                                          |
//! |------------------------------------------|---------------------------------------------------|
//! | `fd_write` to fd 1 / fd 2                | gathered a line at a time; each line one `log` call: stdout at info, stderr at warn, the runtime's `panic: ` / `fatal error: ` lines at error |
//! | `proc_exit`                              | logs what is gathered, then traps (`unreachable`): `os.Exit` and a fatal error end the call |
//! | `clock_time_get`                         | a virtual clock: 1 µs further on each reading, from 0 (1970) |
//! | `poll_oneoff`                            | clock subscriptions fire at once and move the virtual clock on; fd ones fail with `EBADF` |
//! | `random_get`                             | `ENOSYS`: the runtime seeds itself from the clock, `crypto/rand` fails loudly (use the request's entropy) |
//! | `args_*`, `environ_*`                    | none                                              |
//! | `sched_yield`                            | succeeds                                          |
//! | every `fd_*`, `path_*`, `sock_*` other   | `EBADF`: no files, no preopened directories, no sockets |
//!
//! and the Go SDK's own two ([`SHIM_MODULE`]): `line-buffer`, the static
//! buffer (in the SDK, [`LINE_BYTES`] long) that lines are gathered in, and
//! `flush`, which logs a last line without its newline at the end of every
//! export. Until the SDK registers its buffer (the runtime's own start-up),
//! each buffer written is one line.
//!
//! Guarantees: the result has no `wasi_snapshot_preview1` import; a preview1
//! function not in this table, or one whose signature is not preview1's, is
//! refused with its name (a new Go release that needs more is a build
//! error, never a silent stub); the shim's state is four globals after the
//! module's own, and it writes only where the module says (iovecs, results,
//! the registered buffer). Caveats: a line is logged as written and must be
//! UTF-8, as every string crossing the component boundary must (a longer
//! line is cut between characters; bytes that are not UTF-8 make the log
//! call, and so the call, trap); the host's log budget (200 calls) bounds
//! what a chatty guest is heard of.
//! Why the runtime's `panic: ` and `fatal error: ` lines go at error level:
//! the host reports a trap with the call's last error line, which is then
//! the reason (a deadlock, a runtime panic in a goroutine of the plugin's)
//! rather than the traceback's last frame; a panic in the plugin's own
//! call is recovered by the SDK, which logs its message and frame in one
//! line.

use std::borrow::Cow;
use std::path::Path;

use wasm_encoder::reencode::{Error as ReencodeError, Reencode, utils};
use wasm_encoder::{
    CodeSection, ConstExpr, FunctionSection, GlobalSection, GlobalType, ImportSection, Module,
    ValType,
};
use wasmparser::{Parser, Payload, TypeRef};
use wit_component::{ComponentEncoder, StringEncoding, embed_component_metadata};
use wit_parser::Resolve;

mod bodies;

pub use bodies::LINE_BYTES;
use bodies::{EBADF, ENOSYS, Shared, Stub, body};

/// The import module the Go runtime's WASI functions come from.
pub const PREVIEW1: &str = "wasi_snapshot_preview1";
/// The import module of the shim's own functions for the Go SDK (abi.go):
/// `line-buffer(ptr)` registers a static buffer of [`LINE_BYTES`] bytes
/// in which stdout and stderr are gathered into lines, `flush()` logs what
/// is gathered (at the end of every export).
pub const SHIM_MODULE: &str = "kubeplug:go-shim";
/// The log import (`kubeplug:plugin/log`) the shim writes to; the Go SDK
/// always imports it.
const LOG_MODULE: &str = "kubeplug:plugin/log@0.1.0";
const LOG_NAME: &str = "log";
/// Why a core module cannot be made a Go plugin component.
#[derive(Debug, thiserror::Error)]
pub enum GoShimError {
    /// The input is not a valid core module.
    #[error("failed to read the core module: {0}")]
    Parse(#[from] wasmparser::BinaryReaderError),
    /// A preview1 (or shim) import the shim does not provide, as
    /// `module.name`.
    #[error(
        "the module imports {0}, which kubeplug's Go shim does not provide (plugins have no files, network or environment)"
    )]
    Unsupported(String),
    /// A preview1 import whose signature is not the one the shim implements.
    #[error("the module imports {PREVIEW1}.{name} as {found}, not as preview1 defines it")]
    Signature { name: String, found: String },
    /// A preview1 import of something other than a function.
    #[error("the module imports {PREVIEW1}.{0} as a non-function")]
    NotAFunction(String),
    /// The shim logs through the SDK's import, which the module lacks.
    #[error(
        "the module writes to stdout/stderr but does not import {LOG_MODULE} {LOG_NAME}: build it with kubeplug's Go SDK"
    )]
    NoLogImport,
    /// Go modules always have globals; the shim's clock goes after them.
    #[error("the module has no global section")]
    NoGlobals,
    /// Re-encoding the module failed.
    #[error("failed to rewrite the module: {0}")]
    Reencode(String),
    /// The WIT could not be read, or has no such world.
    #[error("failed to read the WIT in {dir}: {message}")]
    Wit { dir: String, message: String },
    /// wit-component refused the module.
    #[error("failed to make a component: {0}")]
    Component(String),
}

/// The audited table: each preview1 function the shim provides, with the
/// parameters it must take (`None`: any, the stub reads none of them) and
/// its results.
type Signature = (Option<&'static [ValType]>, &'static [ValType]);
fn stub_for(module: &str, name: &str) -> Option<(Stub, Signature)> {
    use ValType::{I32, I64};
    const ERRNO: &[ValType] = &[I32];
    if module == SHIM_MODULE {
        return match name {
            "line-buffer" => Some((Stub::LineBuffer, (Some(&[I32]), &[]))),
            "flush" => Some((Stub::Flush, (Some(&[]), &[]))),
            _ => None,
        };
    }
    Some(match name {
        "fd_write" => (Stub::FdWrite, (Some(&[I32, I32, I32, I32]), ERRNO)),
        "proc_exit" => (Stub::ProcExit, (Some(&[I32]), &[])),
        "clock_time_get" => (Stub::ClockTimeGet, (Some(&[I32, I64, I32]), ERRNO)),
        "poll_oneoff" => (Stub::PollOneoff, (Some(&[I32, I32, I32, I32]), ERRNO)),
        "args_sizes_get" | "environ_sizes_get" => (Stub::SizesZero, (Some(&[I32, I32]), ERRNO)),
        "args_get" | "environ_get" => (Stub::Errno(0), (Some(&[I32, I32]), ERRNO)),
        "sched_yield" => (Stub::Errno(0), (Some(&[]), ERRNO)),
        "random_get" => (Stub::Errno(ENOSYS), (Some(&[I32, I32]), ERRNO)),
        name if name.starts_with("fd_")
            || name.starts_with("path_")
            || name.starts_with("sock_") =>
        {
            (Stub::Errno(EBADF), (None, ERRNO))
        }
        _ => return None,
    })
}

/// One function import of the input.
struct Import {
    module: String,
    name: String,
    ty: u32,
}

/// Replace every `wasi_snapshot_preview1` import of `core` with the shim's
/// function (see the module docs). The module's other imports keep their
/// order; the shim's functions go after the module's own.
pub fn shim(core: &[u8]) -> Result<Vec<u8>, GoShimError> {
    let mut types: Vec<(Vec<ValType>, Vec<ValType>)> = Vec::new();
    let mut imports: Vec<Import> = Vec::new();
    let mut defined = 0u32;
    let mut globals = 0u32;
    for payload in Parser::new(0).parse_all(core) {
        match payload? {
            Payload::TypeSection(reader) => {
                for ty in reader.into_iter_err_on_gc_types() {
                    let ty = ty?;
                    let convert = |v: &[wasmparser::ValType]| {
                        v.iter()
                            .map(|t| match t {
                                wasmparser::ValType::I32 => ValType::I32,
                                wasmparser::ValType::I64 => ValType::I64,
                                wasmparser::ValType::F32 => ValType::F32,
                                wasmparser::ValType::F64 => ValType::F64,
                                _ => ValType::V128,
                            })
                            .collect::<Vec<_>>()
                    };
                    types.push((convert(ty.params()), convert(ty.results())));
                }
            }
            Payload::ImportSection(reader) => {
                for import in reader.into_imports() {
                    let import = import?;
                    match import.ty {
                        TypeRef::Func(ty) | TypeRef::FuncExact(ty) => imports.push(Import {
                            module: import.module.to_string(),
                            name: import.name.to_string(),
                            ty,
                        }),
                        TypeRef::Global(_) => globals += 1,
                        _ if import.module == PREVIEW1 || import.module == SHIM_MODULE => {
                            return Err(GoShimError::NotAFunction(import.name.to_string()));
                        }
                        _ => {}
                    }
                }
            }
            Payload::FunctionSection(reader) => defined = reader.count(),
            Payload::GlobalSection(reader) => globals += reader.count(),
            _ => {}
        }
    }

    let mut kept = Vec::new();
    let mut removed = Vec::new();
    for (index, import) in imports.iter().enumerate() {
        if import.module != PREVIEW1 && import.module != SHIM_MODULE {
            kept.push(index as u32);
            continue;
        }
        let (stub, (params, results)) =
            stub_for(&import.module, &import.name).ok_or_else(|| {
                GoShimError::Unsupported(format!("{}.{}", import.module, import.name))
            })?;
        let (have_params, have_results) = &types[import.ty as usize];
        let params_match = params.is_none_or(|p| have_params.as_slice() == p);
        if !params_match || have_results.as_slice() != results {
            return Err(GoShimError::Signature {
                name: import.name.clone(),
                found: format!("{have_params:?} -> {have_results:?}"),
            });
        }
        removed.push((index as u32, stub, import.ty, have_params.len() as u32));
    }
    let log = imports
        .iter()
        .position(|i| i.module == LOG_MODULE && i.name == LOG_NAME)
        .and_then(|old| kept.iter().position(|k| *k == old as u32))
        .map(|new| new as u32);
    let logs = [Stub::FdWrite, Stub::Flush, Stub::ProcExit];
    if log.is_none() && removed.iter().any(|r| logs.contains(&r.1)) {
        return Err(GoShimError::NoLogImport);
    }

    let mut rewriter = Rewriter {
        imports: imports.len() as u32,
        kept,
        removed,
        defined,
        clock: globals,
        log: log.unwrap_or(0),
        saw_globals: false,
    };
    let mut module = Module::new();
    rewriter
        .parse_core_module(&mut module, Parser::new(0), core)
        .map_err(|e| GoShimError::Reencode(format!("{e:?}")))?;
    if !rewriter.saw_globals {
        return Err(GoShimError::NoGlobals);
    }
    Ok(module.finish())
}

/// The re-encoder: drops the preview1 imports, renumbers functions, adds
/// the shim's functions and its clock.
struct Rewriter {
    /// Function imports of the input.
    imports: u32,
    /// Old indices of the function imports kept, in order.
    kept: Vec<u32>,
    /// (old index, stub, type index, parameter count) of each removed one.
    removed: Vec<(u32, Stub, u32, u32)>,
    /// Functions the input defines.
    defined: u32,
    /// Index of the shim's clock global (after every other global), then
    /// its line buffer's three (see [`Shared`]).
    clock: u32,
    /// New index of the log import.
    log: u32,
    saw_globals: bool,
}

impl Reencode for Rewriter {
    type Error = std::convert::Infallible;

    fn function_index(&mut self, func: u32) -> Result<u32, ReencodeError> {
        let kept = self.kept.len() as u32;
        if func >= self.imports {
            return Ok(func - self.imports + kept);
        }
        if let Some(at) = self.kept.iter().position(|k| *k == func) {
            return Ok(at as u32);
        }
        let at = self
            .removed
            .iter()
            .position(|r| r.0 == func)
            .expect("every import is kept or removed") as u32;
        Ok(kept + self.defined + at)
    }

    fn parse_import_section(
        &mut self,
        imports: &mut ImportSection,
        section: wasmparser::ImportSectionReader<'_>,
    ) -> Result<(), ReencodeError> {
        for import in section.into_imports() {
            let import = import?;
            if import.module != PREVIEW1 && import.module != SHIM_MODULE {
                imports.import(import.module, import.name, self.entity_type(import.ty)?);
            }
        }
        Ok(())
    }

    fn parse_function_section(
        &mut self,
        functions: &mut FunctionSection,
        section: wasmparser::FunctionSectionReader<'_>,
    ) -> Result<(), ReencodeError> {
        utils::parse_function_section(self, functions, section)?;
        for (_, _, ty, _) in &self.removed {
            functions.function(*ty);
        }
        Ok(())
    }

    fn parse_global_section(
        &mut self,
        globals: &mut GlobalSection,
        section: wasmparser::GlobalSectionReader<'_>,
    ) -> Result<(), ReencodeError> {
        utils::parse_global_section(self, globals, section)?;
        let ty = GlobalType {
            val_type: ValType::I64,
            mutable: true,
            shared: false,
        };
        globals.global(ty, &ConstExpr::i64_const(0));
        // line_ptr, line_len, line_fd
        let ty = GlobalType {
            val_type: ValType::I32,
            mutable: true,
            shared: false,
        };
        for _ in 0..3 {
            globals.global(ty, &ConstExpr::i32_const(0));
        }
        self.saw_globals = true;
        Ok(())
    }

    fn parse_code_section(
        &mut self,
        code: &mut CodeSection,
        section: wasmparser::CodeSectionReader<'_>,
    ) -> Result<(), ReencodeError> {
        utils::parse_code_section(self, code, section)?;
        for (_, stub, _, params) in &self.removed {
            let shared = Shared {
                log: self.log,
                clock: self.clock,
                line_ptr: self.clock + 1,
                line_len: self.clock + 2,
                line_fd: self.clock + 3,
            };
            code.function(&body(*stub, *params, shared));
        }
        Ok(())
    }
}

/// The component of a Go plugin: `core` (what `go build -buildmode=c-shared`
/// made with the Go SDK) with the shim, typed by `world` of the WIT in
/// `wit_dir` (the SDK's `plugin-with-admission`).
pub fn componentize(core: &[u8], wit_dir: &Path, world: &str) -> Result<Vec<u8>, GoShimError> {
    let wit_error = |message: String| GoShimError::Wit {
        dir: wit_dir.display().to_string(),
        message,
    };
    let mut resolve = Resolve::default();
    let (package, _) = resolve
        .push_dir(wit_dir)
        .map_err(|e| wit_error(format!("{e:#}")))?;
    let world = resolve
        .select_world(&[package], Some(world))
        .map_err(|e| wit_error(format!("{e:#}")))?;
    let mut module = shim(core)?;
    // Says what built it, as rustc, componentize-py and componentize-js
    // do (`kubeplug-bench` reads it for its language column).
    let mut producers = wasm_metadata::Producers::empty();
    producers.add("language", "Go", "");
    producers.add(
        "processed-by",
        "kubeplug-go-shim",
        env!("CARGO_PKG_VERSION"),
    );
    module = producers
        .add_to_wasm(&module)
        .map_err(|e| GoShimError::Component(format!("{e:#}")))?;
    embed_component_metadata(&mut module, &resolve, world, StringEncoding::UTF8)
        .map_err(|e| GoShimError::Component(format!("{e:#}")))?;
    ComponentEncoder::default()
        .validate(true)
        .module(&module)
        .and_then(|encoder| {
            let mut encoder = encoder;
            encoder.encode()
        })
        .map_err(|e| GoShimError::Component(format!("{e:#}")))
}

/// Names of `core`'s imports from `module`, for tests and reports.
pub fn imports_from<'a>(core: &'a [u8], module: &str) -> Result<Vec<Cow<'a, str>>, GoShimError> {
    let mut names = Vec::new();
    for payload in Parser::new(0).parse_all(core) {
        if let Payload::ImportSection(reader) = payload? {
            for import in reader.into_imports() {
                let import = import?;
                if import.module == module {
                    names.push(Cow::Borrowed(import.name));
                }
            }
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::bodies::{CLOCK_TICK_NS, LEVEL_ERROR, LEVEL_WARN, mem};
    use super::*;
    use std::sync::{Arc, Mutex};
    use wasm_encoder::{
        EntityType, ExportKind, ExportSection, MemoryType, TypeSection, ValType::I32, ValType::I64,
    };
    use wasm_encoder::{Function, Instruction};

    /// A module that imports what Go's runtime imports and exports one
    /// function per shim behaviour.
    fn guest(extra_import: Option<&str>) -> Vec<u8> {
        let mut types = TypeSection::new();
        types.ty().function([I32; 5], []); // 0: log
        types.ty().function([I32; 4], [I32]); // 1: fd_write, poll_oneoff
        types.ty().function([I32], []); // 2: proc_exit
        types.ty().function([I32, I64, I32], [I32]); // 3: clock_time_get
        types.ty().function([I32, I32], [I32]); // 4: random_get, args_sizes_get, fd_prestat_get
        types.ty().function([I32, I32], [I32]); // 5: write(ptr, len) -> errno
        types.ty().function([], [I64]); // 6: clock() -> ns
        types.ty().function([], []); // 7: exit()
        types.ty().function([], [I32]); // 8: prestat(), random(), args()
        types.ty().function([I64], [I64]); // 9: sleep(ns) -> clock after
        let mut imports = ImportSection::new();
        imports.import(LOG_MODULE, LOG_NAME, EntityType::Function(0)); // f0
        for (name, ty) in [
            ("fd_write", 1),       // f1
            ("proc_exit", 2),      // f2
            ("clock_time_get", 3), // f3
            ("poll_oneoff", 1),    // f4
            ("random_get", 4),     // f5
            ("args_sizes_get", 4), // f6
            ("fd_prestat_get", 4), // f7
        ] {
            imports.import(PREVIEW1, name, EntityType::Function(ty));
        }
        imports.import(SHIM_MODULE, "line-buffer", EntityType::Function(2)); // f8
        imports.import(SHIM_MODULE, "flush", EntityType::Function(7)); // f9
        if let Some(name) = extra_import {
            imports.import(PREVIEW1, name, EntityType::Function(8));
        }
        let mut functions = FunctionSection::new();
        for ty in [5, 6, 7, 8, 8, 8, 9, 7, 7] {
            functions.function(ty);
        }
        let mut memories = wasm_encoder::MemorySection::new();
        memories.memory(MemoryType {
            minimum: 1,
            maximum: None,
            memory64: false,
            shared: false,
            page_size_log2: None,
        });
        let mut globals = GlobalSection::new();
        globals.global(
            GlobalType {
                val_type: I32,
                mutable: true,
                shared: false,
            },
            &ConstExpr::i32_const(0),
        );
        let imported = 10 + u32::from(extra_import.is_some());
        let mut exports = ExportSection::new();
        exports.export("memory", ExportKind::Memory, 0);
        for (i, name) in [
            "write", "clock", "exit", "prestat", "random", "args", "sleep", "register", "flush",
        ]
        .iter()
        .enumerate()
        {
            exports.export(name, ExportKind::Func, imported + i as u32);
        }
        use Instruction as I;
        let mut code = CodeSection::new();
        // write(ptr, len): iovec {ptr, len} at 0, fd_write(2, 0, 1, 16).
        let mut f = Function::new([]);
        f.instruction(&I::I32Const(0))
            .instruction(&I::LocalGet(0))
            .instruction(&I::I32Store(mem(0, 2)))
            .instruction(&I::I32Const(0))
            .instruction(&I::LocalGet(1))
            .instruction(&I::I32Store(mem(4, 2)))
            .instruction(&I::I32Const(2))
            .instruction(&I::I32Const(0))
            .instruction(&I::I32Const(1))
            .instruction(&I::I32Const(16))
            .instruction(&I::Call(1))
            .instruction(&I::End);
        code.function(&f);
        // clock(): clock_time_get(0, 0, 32), then the value at 32.
        let mut f = Function::new([]);
        f.instruction(&I::I32Const(0))
            .instruction(&I::I64Const(0))
            .instruction(&I::I32Const(32))
            .instruction(&I::Call(3))
            .instruction(&I::Drop)
            .instruction(&I::I32Const(32))
            .instruction(&I::I64Load(mem(0, 3)))
            .instruction(&I::End);
        code.function(&f);
        let mut f = Function::new([]);
        f.instruction(&I::I32Const(3))
            .instruction(&I::Call(2))
            .instruction(&I::End);
        code.function(&f);
        for (callee, arg) in [(7, 3), (5, 64), (6, 64)] {
            let mut f = Function::new([]);
            f.instruction(&I::I32Const(arg))
                .instruction(&I::I32Const(8))
                .instruction(&I::Call(callee))
                .instruction(&I::End);
            code.function(&f);
        }
        // sleep(ns): one relative clock subscription at 64, events at 128.
        let mut f = Function::new([]);
        f.instruction(&I::I32Const(64))
            .instruction(&I::I64Const(7))
            .instruction(&I::I64Store(mem(0, 3)))
            .instruction(&I::I32Const(64))
            .instruction(&I::LocalGet(0))
            .instruction(&I::I64Store(mem(24, 3)))
            .instruction(&I::I32Const(64))
            .instruction(&I::I32Const(128))
            .instruction(&I::I32Const(1))
            .instruction(&I::I32Const(200))
            .instruction(&I::Call(4))
            .instruction(&I::Drop)
            .instruction(&I::Call(imported + 1))
            .instruction(&I::End);
        code.function(&f);
        // register(): the line buffer at 4096; flush().
        let mut f = Function::new([]);
        f.instruction(&I::I32Const(4096))
            .instruction(&I::Call(8))
            .instruction(&I::End);
        code.function(&f);
        let mut f = Function::new([]);
        f.instruction(&I::Call(9)).instruction(&I::End);
        code.function(&f);
        let mut module = Module::new();
        module
            .section(&types)
            .section(&imports)
            .section(&functions)
            .section(&memories)
            .section(&globals)
            .section(&exports)
            .section(&code);
        module.finish()
    }

    type Logs = Arc<Mutex<Vec<(i32, String)>>>;

    fn instantiate(core: &[u8]) -> (wasmtime::Store<Logs>, wasmtime::Instance) {
        let engine = wasmtime::Engine::default();
        let module = wasmtime::Module::new(&engine, core).expect("the shimmed module compiles");
        let mut linker = wasmtime::Linker::new(&engine);
        linker
            .func_wrap(
                LOG_MODULE,
                LOG_NAME,
                |mut caller: wasmtime::Caller<'_, Logs>,
                 level: i32,
                 ptr: i32,
                 len: i32,
                 _: i32,
                 _: i32| {
                    let memory = caller.get_export("memory").unwrap().into_memory().unwrap();
                    let bytes = memory.data(&caller)[ptr as usize..][..len as usize].to_vec();
                    let text = String::from_utf8(bytes).unwrap();
                    caller.data().lock().unwrap().push((level, text));
                },
            )
            .unwrap();
        let mut store = wasmtime::Store::new(&engine, Logs::default());
        let instance = linker.instantiate(&mut store, &module).unwrap();
        (store, instance)
    }

    #[test]
    fn the_shimmed_module_imports_nothing_of_preview1_and_validates() {
        let shimmed = shim(&guest(None)).unwrap();
        wasmparser::Validator::new().validate_all(&shimmed).unwrap();
        assert!(imports_from(&shimmed, PREVIEW1).unwrap().is_empty());
        assert_eq!(imports_from(&shimmed, LOG_MODULE).unwrap(), [LOG_NAME]);
    }

    #[test]
    fn stderr_reaches_the_log_at_error_and_exit_traps() {
        let (mut store, instance) = instantiate(&shim(&guest(None)).unwrap());
        let memory = instance.get_memory(&mut store, "memory").unwrap();
        memory.write(&mut store, 1000, b"panic: boom").unwrap();
        let write = instance
            .get_typed_func::<(i32, i32), i32>(&mut store, "write")
            .unwrap();
        assert_eq!(write.call(&mut store, (1000, 11)).unwrap(), 0);
        assert_eq!(
            write.call(&mut store, (1000, 0)).unwrap(),
            0,
            "nothing to log"
        );
        assert_eq!(
            *store.data().lock().unwrap(),
            [(LEVEL_ERROR, "panic: boom".to_string())]
        );
        let mut written = [0; 4];
        memory.read(&store, 16, &mut written).unwrap();
        assert_eq!(
            u32::from_le_bytes(written),
            0,
            "the last write wrote 0 bytes"
        );
        let exit = instance
            .get_typed_func::<(), ()>(&mut store, "exit")
            .unwrap();
        let trap = exit.call(&mut store, ()).unwrap_err();
        assert_eq!(
            trap.downcast_ref::<wasmtime::Trap>(),
            Some(&wasmtime::Trap::UnreachableCodeReached)
        );
    }

    /// With the SDK's buffer, what the runtime writes in pieces is logged
    /// a line at a time: on a newline, a full buffer, a flush or an exit.
    #[test]
    fn output_is_logged_a_line_at_a_time_once_the_sdk_gives_a_buffer() {
        let (mut store, instance) = instantiate(&shim(&guest(None)).unwrap());
        let memory = instance.get_memory(&mut store, "memory").unwrap();
        let unit = |store: &mut wasmtime::Store<Logs>, name: &str| {
            instance
                .get_typed_func::<(), ()>(&mut *store, name)
                .unwrap()
                .call(store, ())
        };
        unit(&mut store, "register").unwrap();
        let write = instance
            .get_typed_func::<(i32, i32), i32>(&mut store, "write")
            .unwrap();
        let put = |store: &mut wasmtime::Store<Logs>, text: &[u8]| {
            memory.write(&mut *store, 1000, text).unwrap();
            assert_eq!(
                write.call(&mut *store, (1000, text.len() as i32)).unwrap(),
                0
            );
        };
        put(&mut store, b"fatal error: ");
        put(&mut store, b"all goroutines are asleep");
        put(&mut store, b"\n\ngoroutine 1");
        assert!(store.data().lock().unwrap().len() == 1, "one line so far");
        unit(&mut store, "flush").unwrap();
        put(&mut store, &[b'x'; 1500]);
        put(&mut store, b"\nlast words");
        unit(&mut store, "exit").unwrap_err();
        let logs = store.data().lock().unwrap().clone();
        let lens: Vec<usize> = logs.iter().map(|(_, l)| l.len()).collect();
        assert_eq!(
            logs[0],
            (LEVEL_ERROR, "fatal error: all goroutines are asleep".into())
        );
        assert_eq!(
            logs[1],
            (LEVEL_WARN, "goroutine 1".into()),
            "not the reason"
        );
        assert_eq!(
            lens[2..4],
            [LINE_BYTES as usize - 4, 1504 - LINE_BYTES as usize]
        );
        assert_eq!(logs[4].1, "last words", "exit logs what is left");
        assert_eq!(logs.len(), 5);
    }

    /// A long line is cut where a character starts: each piece is UTF-8,
    /// as the log import requires (the harness's log reads it as such).
    #[test]
    fn a_long_line_is_cut_between_characters() {
        let (mut store, instance) = instantiate(&shim(&guest(None)).unwrap());
        let memory = instance.get_memory(&mut store, "memory").unwrap();
        let unit = |store: &mut wasmtime::Store<Logs>, name: &str| {
            instance
                .get_typed_func::<(), ()>(&mut *store, name)
                .unwrap()
                .call(store, ())
                .unwrap();
        };
        unit(&mut store, "register");
        let text = format!("x{}", "é€😀".repeat(200));
        memory.write(&mut store, 10_000, text.as_bytes()).unwrap();
        let write = instance
            .get_typed_func::<(i32, i32), i32>(&mut store, "write")
            .unwrap();
        let written = write.call(&mut store, (10_000, text.len() as i32));
        assert_eq!(written.unwrap(), 0);
        unit(&mut store, "flush");
        let logs = store.data().lock().unwrap().clone();
        assert!(logs.len() > 1, "cut");
        assert!(logs.iter().all(|(_, l)| l.len() <= LINE_BYTES as usize));
        let joined: String = logs.iter().map(|(_, l)| l.as_str()).collect();
        assert_eq!(joined, text);
    }

    #[test]
    fn there_are_no_files_arguments_or_randomness_and_the_clock_is_virtual() {
        let (mut store, instance) = instantiate(&shim(&guest(None)).unwrap());
        let call = |store: &mut wasmtime::Store<Logs>, name: &str| {
            instance
                .get_typed_func::<(), i32>(&mut *store, name)
                .unwrap()
                .call(store, ())
                .unwrap()
        };
        assert_eq!(call(&mut store, "prestat"), EBADF, "no preopened directory");
        assert_eq!(call(&mut store, "random"), ENOSYS);
        assert_eq!(call(&mut store, "args"), 0);
        let clock = instance
            .get_typed_func::<(), i64>(&mut store, "clock")
            .unwrap();
        assert_eq!(clock.call(&mut store, ()).unwrap(), CLOCK_TICK_NS);
        assert_eq!(clock.call(&mut store, ()).unwrap(), 2 * CLOCK_TICK_NS);
        let sleep = instance
            .get_typed_func::<i64, i64>(&mut store, "sleep")
            .unwrap();
        let hour = 3_600_000_000_000;
        assert_eq!(
            sleep.call(&mut store, hour).unwrap(),
            2 * CLOCK_TICK_NS + hour + CLOCK_TICK_NS,
            "a sleep passes at once on the virtual clock"
        );
        let mut event = [0; 11];
        instance
            .get_memory(&mut store, "memory")
            .unwrap()
            .read(&store, 128, &mut event)
            .unwrap();
        assert_eq!(event[0], 7, "the event carries the subscription's userdata");
        assert_eq!(&event[8..11], &[0, 0, 0], "no error, a clock event");
    }

    #[test]
    fn a_preview1_function_the_shim_does_not_provide_is_refused_by_name() {
        let error = shim(&guest(Some("proc_raise"))).unwrap_err();
        assert!(
            matches!(&error, GoShimError::Unsupported(name) if name == "wasi_snapshot_preview1.proc_raise")
        );
        assert!(
            error
                .to_string()
                .contains("wasi_snapshot_preview1.proc_raise")
        );
    }
}
