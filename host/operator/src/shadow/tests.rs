use super::*;
use kubeplug_core::manifest::ApiResource;
use kubeplug_runtime::Request;

fn sts(image: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db", "namespace": "a"},
           "spec": {"template": {"spec": {"containers": [{"name": "pg", "image": image}]}}}})
}

fn desired(status: Value) -> Desired {
    Desired {
        status: Some(status),
        ..Desired::default()
    }
}

/// A decision of `answer` whose children are `children`, as prepared.
fn decided(answer: &Desired, children: &[Value]) -> Decision {
    let children = children
        .iter()
        .map(|child| {
            let kind = child["kind"].as_str().unwrap_or_default();
            let resource = ApiResource::new("", "v1", kind, "", true);
            let create = kubeplug_core::plan::Action::Create;
            kubeplug_core::plan::Step::new(resource, child.clone(), create)
        })
        .collect();
    Ok(Plan {
        answer: answer.clone(),
        children,
        prune: Vec::new(),
        status: answer.status.clone(),
        parent_patch: None,
        requeue_after: answer.requeue_after,
    })
}

#[test]
fn the_same_answer_has_no_differences() {
    let d = desired(json!({"phase": "Running"}));
    let children = [sts("postgres:16")];
    assert!(compare(&decided(&d, &children), &decided(&d, &children)).is_empty());
    assert!(compare(&Err("x".into()), &Err("x".into())).is_empty());
}

#[test]
fn a_changed_image_names_the_list_and_both_values() {
    let d = desired(json!({"phase": "Running"}));
    let (live, cand) = ([sts("postgres:16")], [sts("mirror/postgres:16")]);
    let found = compare(&decided(&d, &live), &decided(&d, &cand));
    assert_eq!(found.len(), 1);
    assert_eq!(found[0]["change"], "changed");
    assert_eq!(found[0]["kind"], "StatefulSet");
    let diff = &found[0]["diff"][0];
    assert_eq!(diff["path"], "/spec/template/spec/containers");
    assert_eq!(diff["candidate"][0]["image"], "mirror/postgres:16");
    assert!(summary(&found[0]).contains("/spec/template/spec/containers"));
}

#[test]
fn added_removed_status_events_and_errors_are_reported() {
    let live = desired(json!({"phase": "Running"}));
    let mut cand = desired(json!({"phase": "Pending", "extra": 1}));
    cand.events.push(kubeplug_runtime::Event {
        warning: false,
        reason: "R".into(),
        message: "m".into(),
    });
    let (a, b) = (
        [sts("x")],
        [
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "db", "namespace": "a"}}),
        ],
    );
    let found = compare(&decided(&live, &a), &decided(&cand, &b));
    let whats: Vec<String> = found
        .iter()
        .map(|d| format!("{} {}", d["what"], d["change"]))
        .collect();
    assert_eq!(
        whats,
        [
            "\"child\" \"added\"",
            "\"child\" \"removed\"",
            "\"status\" null",
            "\"events\" null"
        ]
    );
    assert_eq!(
        found[2]["diff"],
        json!([{"path": "/extra", "live": null, "candidate": 1}, {"path": "/phase", "live": "Running", "candidate": "Pending"}])
    );
    let failed = compare(&decided(&live, &a), &Err("plugin x trapped".into()));
    assert_eq!(failed[0]["candidate"]["error"], "plugin x trapped");
}

fn unused_check(_: &Plugin, _: Desired) -> Decision {
    Err("unused".into())
}

fn job(name: &str, bytes: usize) -> Job {
    let parent: Arc<str> = format!("{{\"metadata\":{{\"name\":\"{name}\"}}}}").into();
    let live = desired(json!({"blob": "x".repeat(bytes)}));
    Job {
        key: ObjectKey::new("a", name),
        request: Arc::new(Request::new(parent, Vec::new(), Vec::new())),
        live: decided(&live, &[]),
        check: Box::new(unused_check),
    }
}

fn span() -> tracing::Span {
    tracing::Span::none()
}

#[test]
fn big_answers_waiting_are_bounded_by_bytes_the_oldest_skipped() {
    let mut waiting = Waiting::default();
    let one = job("p0", 1 << 20).bytes();
    let mut skipped = 0;
    for i in 0..40 {
        skipped += waiting.push(job(&format!("p{i}"), 1 << 20), span(), (QUEUE, QUEUE_BYTES));
        assert!(
            waiting.bytes <= QUEUE_BYTES,
            "{} bytes waiting",
            waiting.bytes
        );
    }
    let kept = waiting.jobs.len();
    assert_eq!(kept, QUEUE_BYTES / one, "as many as fit");
    assert_eq!(skipped as usize, 40 - kept);
    assert_eq!(
        waiting.jobs.front().map(|(j, _, _)| j.key.name.clone()),
        Some(format!("p{}", 40 - kept)),
        "the oldest went first"
    );
    assert_eq!(
        waiting.bytes,
        waiting.jobs.iter().map(|(_, _, b)| b).sum::<usize>()
    );
}

#[test]
fn an_answer_bigger_than_the_whole_queue_is_skipped_and_pushes_nothing_out() {
    let mut waiting = Waiting::default();
    waiting.push(job("small", 10), span(), (QUEUE, QUEUE_BYTES));
    assert_eq!(
        waiting.push(job("huge", QUEUE_BYTES), span(), (QUEUE, QUEUE_BYTES)),
        1
    );
    assert_eq!(waiting.jobs.len(), 1);
}

#[test]
fn a_newer_request_of_a_parent_replaces_the_older_without_a_skip() {
    let mut waiting = Waiting::default();
    assert_eq!(
        waiting.push(job("p", 1000), span(), (QUEUE, QUEUE_BYTES)),
        0
    );
    assert_eq!(
        waiting.push(job("p", 2000), span(), (QUEUE, QUEUE_BYTES)),
        0
    );
    assert_eq!(waiting.jobs.len(), 1);
    assert_eq!(waiting.bytes, job("p", 2000).bytes());
    // And the count bound holds as before.
    let mut waiting = Waiting::default();
    let dropped: u64 = (0..5)
        .map(|i| waiting.push(job(&format!("q{i}"), 10), span(), (3, QUEUE_BYTES)))
        .sum();
    assert_eq!((waiting.jobs.len(), dropped), (3, 2));
    while waiting.pop_front().is_some() {}
    assert_eq!(waiting.bytes, 0);
}
