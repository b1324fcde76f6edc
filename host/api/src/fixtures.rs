//! Registry rows for the API's tests: one in a given state, and one with
//! every field filled, including texts that only callers who may get
//! `plugins/details` should see (`hunter2`, the `team-a` directory).

use serde_json::json;

use kubeplug_core::manifest::{ApiResource, Manifest, Mode, Related};
use kubeplug_core::rollout::State;
use kubeplug_core::whatif::{Details, FieldCount, KindCount, Summary};
use kubeplug_operator::registry::{PluginDetail, Promotion, Status};
use kubeplug_operator::shadow::ShadowStatus;
use kubeplug_operator::whatif::{Phase, Report};

fn kind(group: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::new(group, "v1", kind, plural, true)
}

/// A row of `state`, serving a `database` plugin of `mode` unless `None`.
pub fn row(state: State, mode: Option<Mode>) -> Status {
    let detail = mode.map(|mode| PluginDetail {
        manifest: Manifest::new(
            "database",
            "0.1.0",
            kind("example.com", "Database", "databases"),
            mode,
        ),
        reconciles: 0,
        errors: 0,
        queue_depth: 0,
    });
    Status {
        file: "/plugins/database.wasm".into(),
        name: Some("database".into()),
        version: None,
        digest: None,
        state,
        loaded_at: None,
        last_error: None,
        reason: None,
        synced: true,
        leading: true,
        shards: None,
        shadow: None,
        candidate_error: None,
        promotion: None,
        detail,
    }
}

/// A what-if report with every field set, details included.
fn report() -> Report {
    let counted = |kind: &str| KindCount {
        kind: kind.into(),
        parents: 1,
    };
    let field = FieldCount {
        kind: "StatefulSet.apps".into(),
        field: "spec.replicas".into(),
        parents: 1,
        examples: Vec::new(),
    };
    Report {
        phase: Phase::Complete,
        candidate_version: "0.2.0".into(),
        candidate_digest: "sha256:b".into(),
        live_version: "0.1.0".into(),
        live_digest: "sha256:a".into(),
        started_at: "2026-01-01T00:00:00Z".into(),
        finished_at: Some("2026-01-01T00:00:01Z".into()),
        seconds: Some(1.0),
        parents_total: 1,
        summary: Summary {
            parents: 1,
            changed: 1,
            unchanged: 0,
            refused: 0,
            failed: 0,
            creates: vec![counted("Service")],
            updates: vec![field.clone()],
            prunes: vec![counted("Secret")],
            status: vec![field.clone()],
            parent_patches: 1,
        },
        error: Some("the manifest changes shape".into()),
        details: Some(Details {
            changed: vec!["hunter2/db".into()],
            truncated: true,
            updates: vec![FieldCount {
                examples: vec!["hunter2/db".into()],
                ..field.clone()
            }],
            examples: vec![json!({"parent": "hunter2/db"})],
            refusals: vec![json!({"parent": "hunter2/db", "reason": "hunter2"})],
            failures: vec![json!({"parent": "hunter2/db", "error": "hunter2"})],
            status: vec![field.clone()],
        }),
    }
}

/// A degraded `database` with every field of its row set: a manifest with
/// all it may ask for, counters, a candidate in shadow with examples and a
/// what-if, a blocked promotion, and error texts.
pub fn full_row() -> Status {
    let mut row = row(State::Degraded, Some(Mode::Composite));
    row.file = "/plugins/team-a/database.wasm".into();
    row.version = Some("0.1.0".into());
    row.digest = Some("sha256:a".into());
    row.loaded_at = Some("2026-01-01T00:00:00Z".into());
    row.last_error = Some("hunter2".into());
    row.reason = Some("secret: hunter2".into());
    row.shadow = Some(ShadowStatus {
        file: "/plugins/team-a/database.next.wasm".into(),
        version: "0.2.0".into(),
        digest: "sha256:b".into(),
        since: "2026-01-01T00:00:00Z".into(),
        comparisons: 3,
        parents_compared: 2,
        parents_differing: 1,
        candidate_errors: 1,
        skipped: 1,
        examples: vec![json!({"parent": "hunter2/db", "differences": []})],
        whatif: Some(report()),
    });
    row.candidate_error = Some("hunter2".into());
    row.promotion = Some(Promotion {
        plugin: "database".into(),
        blocked: "1 of 1 parents (100.0 %) would change".into(),
        version: "0.2.0".into(),
        digest: "sha256:b".into(),
        whatif: Some(report()),
    });
    let detail = row.detail.as_mut().expect("serving");
    let manifest = &mut detail.manifest;
    manifest.children = vec![
        kind("apps", "StatefulSet", "statefulsets"),
        kind("", "Service", "services"),
    ];
    manifest.related = vec![Related {
        resource: kind("", "Pod", "pods"),
        match_labels: Vec::new(),
    }];
    manifest.namespaces = vec!["shop".into()];
    manifest.finalizer = Some("kubeplug.io/database".into());
    manifest.resync_seconds = Some(300);
    detail.reconciles = 10;
    detail.errors = 1;
    detail.queue_depth = 2;
    row
}
