//! One failure reads the same wherever it is shown: `kubeplug render`
//! prints a plugin's failure as the live host logs it. A test of its own
//! because it spans the author's kit and the operator, which never import
//! each other.

use std::time::Duration;

use kubeplug_core::plan::{self, FenceError};
use kubeplug_kit::render::RenderError;
use kubeplug_kube::report::format_chain;
use kubeplug_operator::reconcile::ReconcileError;
use kubeplug_runtime::{CallError, GuestError};

/// What `kubeplug render` prints after `error: ` (see `cli::main`).
fn printed(error: RenderError) -> String {
    format!("{:#}", anyhow::Error::from(error))
}

#[test]
fn render_prints_a_failure_as_the_host_logs_it() {
    let calls = || {
        let plugin = "database".to_string();
        vec![
            CallError::Guest {
                plugin: plugin.clone(),
                error: GuestError::InvalidInput("spec.replicas: expected a number".into()),
            },
            CallError::Trap {
                plugin: plugin.clone(),
                message: "wasm trap: unreachable; guest stderr: panicked at x".into(),
            },
            CallError::Deadline {
                plugin: plugin.clone(),
                timeout: Duration::from_millis(2500),
            },
            CallError::MemoryCap {
                plugin,
                limit_bytes: 1 << 20,
            },
        ]
    };
    for (host, render) in calls().into_iter().zip(calls()) {
        let logged = format_chain(&ReconcileError::Call(host));
        assert_eq!(printed(RenderError::Call(render)), logged);
    }
    let fenced = || plan::Fenced {
        plugin: "database".into(),
        source: FenceError::Duplicate {
            kind: "Service".into(),
            name: "db".into(),
        },
    };
    let logged = format_chain(&ReconcileError::Fence(fenced()));
    assert_eq!(
        logged,
        "plugin database crossed its fence: child Service/db is returned twice"
    );
    assert_eq!(printed(RenderError::Fence(fenced())), logged);
}
