//! Writes a "compile bomb": a valid WebAssembly component that is cheap to
//! produce and to check superficially, but slow and memory-hungry to compile.
//!
//! For testing the host's compile-time and compile-memory caps at load: a
//! plugin file must not be able to stall or exhaust the host just by being
//! dropped into the plugin directory.
//!
//! Usage: `compile-bomb <functions> <out.wasm>`
//!
//! The component embeds one core module with `<functions>` functions (each
//! ~40 instructions of i64 arithmetic on locals plus a call to the previous
//! function) and instantiates it. Its only top-level export is an empty
//! instance named `kubeplug:plugin/reconciler@0.1.0`, so a check of the
//! export names passes while linking against the real contract fails, after
//! compilation. Measured with wasmtime 48 (Cranelift, parallel compilation)
//! on the project's busy 2-core machine: 20,000 functions (1.6 MB) compile in
//! ~2 s at ~135 MiB peak RSS; 100,000 functions (8.1 MB) in ~11 s at
//! ~630 MiB. Both grow about linearly with `<functions>`.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use wasm_encoder::{
    CodeSection, Component, ComponentExportKind, ComponentExportSection, ComponentInstanceSection,
    ExportKind, ExportSection, Function, FunctionSection, InstanceSection, Module, ModuleArg,
    ModuleSection, TypeSection, ValType,
};

/// The export a host looks for first.
const RECONCILER: &str = "kubeplug:plugin/reconciler@0.1.0";

/// One function `(i64, i64) -> i64` with four i64 locals; `index > 0` also
/// calls function `index - 1`, so nothing can be treated as dead code.
fn function(index: u32) -> Function {
    let mut f = Function::new([(4, ValType::I64)]);
    let salt = i64::from(index).wrapping_mul(0x9E37_79B9_7F4A_7C15_u64 as i64);
    let mut ins = f.instructions();
    // 2 = a + b; 3 = (2 * salt) ^ a; 4 = rotl(3, 13) - 2; 5 = (4 >> 7) * (3 | 1)
    ins.local_get(0).local_get(1).i64_add().local_set(2);
    ins.local_get(2)
        .i64_const(salt)
        .i64_mul()
        .local_get(0)
        .i64_xor();
    ins.local_set(3);
    ins.local_get(3)
        .i64_const(13)
        .i64_rotl()
        .local_get(2)
        .i64_sub();
    ins.local_set(4);
    ins.local_get(4)
        .i64_const(7)
        .i64_shr_u()
        .local_get(3)
        .i64_const(1);
    ins.i64_or().i64_mul().local_set(5);
    if index > 0 {
        ins.local_get(5).local_get(4).call(index - 1).local_set(5);
    }
    // result = ((5 + 3) ^ (4 * 2)) + rotr(5, 29)
    ins.local_get(5)
        .local_get(3)
        .i64_add()
        .local_get(4)
        .local_get(2);
    ins.i64_mul()
        .i64_xor()
        .local_get(5)
        .i64_const(29)
        .i64_rotr();
    ins.i64_add().end();
    f
}

/// The core module: `functions` functions, the last one exported as `run`.
fn module(functions: u32) -> Module {
    let mut types = TypeSection::new();
    types
        .ty()
        .function([ValType::I64, ValType::I64], [ValType::I64]);
    let mut funcs = FunctionSection::new();
    let mut code = CodeSection::new();
    for index in 0..functions {
        funcs.function(0);
        code.function(&function(index));
    }
    let mut exports = ExportSection::new();
    exports.export("run", ExportKind::Func, functions - 1);
    let mut module = Module::new();
    module
        .section(&types)
        .section(&funcs)
        .section(&exports)
        .section(&code);
    module
}

/// The component: the module, an instance of it, and an empty instance
/// exported as the reconciler interface.
fn component(functions: u32) -> Vec<u8> {
    let mut component = Component::new();
    component.section(&ModuleSection(&module(functions)));
    let mut core_instances = InstanceSection::new();
    core_instances.instantiate(0, std::iter::empty::<(&str, ModuleArg)>());
    component.section(&core_instances);
    let mut instances = ComponentInstanceSection::new();
    instances.export_items(std::iter::empty::<(&str, ComponentExportKind, u32)>());
    component.section(&instances);
    let mut exports = ComponentExportSection::new();
    exports.export(RECONCILER, ComponentExportKind::Instance, 0, None);
    component.section(&exports);
    component.finish()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (functions, out) = match args.as_slice() {
        [_, functions, out] => match functions.parse::<u32>() {
            Ok(n) if n > 0 => (n, out),
            _ => {
                eprintln!("compile-bomb: <functions> must be a positive integer");
                return ExitCode::from(2);
            }
        },
        _ => {
            eprintln!("usage: compile-bomb <functions> <out.wasm>");
            return ExitCode::from(2);
        }
    };
    let bytes = component(functions);
    if let Err(e) = std::fs::write(out, &bytes) {
        eprintln!("compile-bomb: writing {out}: {e}");
        return ExitCode::FAILURE;
    }
    println!("{out}: {functions} functions, {} bytes", bytes.len());
    ExitCode::SUCCESS
}
