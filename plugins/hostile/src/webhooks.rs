//! The hostile plugin's admission and conversion answers: each misbehaves
//! as the object's `spec.admit` (validate, mutate) or `spec.convert` says,
//! to prove the host keeps a webhook inside the plugin's fence and the API
//! server's time.
//!
//! `spec.admit`:
//! - `loop`: spins forever; `sleep`: sleeps an hour; `alloc`: grows memory
//!   without bound; `panic`: panics (in validate and mutate alike).
//! - `hold`: fills `spec.mib` (default 100) MiB and holds it for `spec.ms`
//!   (default 1800) milliseconds, then allows, unchanged (validate and
//!   mutate alike; the reconcile behaviour `hold` with other defaults): a
//!   heavy review that stays within a plugin's memory cap and deadline.
//! - `warnings`: validate allows with 100 warnings (over the host's quota).
//! - `deny`: validate denies, naming `spec.admit`.
//! - `escape`: mutate sets `status`, an ownerReference and the label
//!   `kubeplug.io/shard` (all outside what a mutation may write).
//! - `defaults`: mutate sets `spec.defaulted: true` (allowed).
//! - As a Pod decorator (objects without `spec.admit` say it in the
//!   annotation `test.kubeplug.io/admit`): `image` rewrites every
//!   container's image, `relabel` sets the label `app: evil` (outside
//!   what a decorator's grant allows), `stamp` sets the annotation
//!   `example.com/stamped: "yes"` (inside it).
//! - anything else: allowed, unchanged.
//!
//! `spec.convert` on any object of a list, or else `convert` in the
//! configuration: `loop` spins; `rename` changes each object's name; `drop` answers
//! one object fewer; `lossy` drops `spec.replicas` (a conversion that loses
//! a field, for the round-trip check); otherwise each object is answered at
//! the asked version, unchanged.

use kubeplug_sdk::{AdmissionRequest, Error, Verdict};
use serde_json::{Value, json};

use crate::Config;

/// The object under review: the new one, or the old one of a delete.
fn reviewed(request: &AdmissionRequest<Config>) -> Option<&Value> {
    request.object.as_ref().or(request.old_object.as_ref())
}

fn admit_behaviour(request: &AdmissionRequest<Config>) -> String {
    reviewed(request)
        .and_then(|o| {
            o["spec"]["admit"]
                .as_str()
                .or(o["metadata"]["annotations"]["test.kubeplug.io/admit"].as_str())
        })
        .unwrap_or("ok")
        .to_string()
}

/// Spin, sleep, grow or panic, if asked; `false` for any other behaviour.
fn misbehave(behave: &str) -> bool {
    match behave {
        "loop" => {
            let mut n: u64 = 0;
            loop {
                n = std::hint::black_box(n.wrapping_add(1));
            }
        }
        "sleep" => {
            std::thread::sleep(std::time::Duration::from_secs(3600));
            true
        }
        "alloc" => {
            let mut hoard: Vec<Vec<u8>> = Vec::new();
            loop {
                hoard.push(vec![1u8; 1 << 20]);
                std::hint::black_box(&hoard);
            }
        }
        "panic" => panic!("hostile plugin asked to panic in admission"),
        _ => false,
    }
}

/// `hold` as the object under review asks (see the module docs).
fn hold(request: &AdmissionRequest<Config>) {
    let spec = reviewed(request).map(|o| &o["spec"]);
    let count = |key: &str, default: u64| spec.and_then(|s| s[key].as_u64()).unwrap_or(default);
    crate::hold(count("mib", 100), count("ms", 1800));
}

pub fn validate(request: &AdmissionRequest<Config>) -> Result<Verdict, Error> {
    let behave = admit_behaviour(request);
    misbehave(&behave);
    if behave == "hold" {
        hold(request);
    }
    Ok(match behave.as_str() {
        "warnings" => (0..100).fold(Verdict::allow(), |v, i| v.warn(format!("warning {i}"))),
        "deny" => Verdict::deny_field("spec.admit", "the hostile plugin denies on request"),
        _ => Verdict::allow(),
    })
}

pub fn mutate(request: &AdmissionRequest<Config>) -> Result<Option<Value>, Error> {
    let behave = admit_behaviour(request);
    misbehave(&behave);
    if behave == "hold" {
        hold(request);
    }
    let Some(mut object) = request.object.clone() else {
        return Ok(None);
    };
    match behave.as_str() {
        "escape" => {
            object["status"] = json!({"phase": "Owned"});
            object["metadata"]["ownerReferences"] = json!([{
                "apiVersion": "v1", "kind": "Namespace", "name": "kube-system",
                "uid": "00000000-0000-0000-0000-000000000000",
            }]);
            object["metadata"]["labels"]["kubeplug.io/shard"] = json!("0");
            Ok(Some(object))
        }
        "defaults" => {
            object["spec"]["defaulted"] = json!(true);
            Ok(Some(object))
        }
        "image" => {
            for container in object["spec"]["containers"]
                .as_array_mut()
                .into_iter()
                .flatten()
            {
                container["image"] = json!("evil:latest");
            }
            Ok(Some(object))
        }
        "relabel" => {
            object["metadata"]["labels"]["app"] = json!("evil");
            Ok(Some(object))
        }
        "stamp" => {
            object["metadata"]["annotations"]["example.com/stamped"] = json!("yes");
            Ok(Some(object))
        }
        _ => Ok(None),
    }
}

pub fn convert(
    objects: Vec<Value>,
    api_version: &str,
    config: &Config,
) -> Result<Vec<Value>, Error> {
    let behave = objects
        .iter()
        .find_map(|o| o["spec"]["convert"].as_str())
        .or(config.convert.as_deref())
        .unwrap_or("ok")
        .to_string();
    misbehave(&behave);
    let mut converted: Vec<Value> = objects
        .into_iter()
        .map(|mut o| {
            o["apiVersion"] = json!(api_version);
            if behave == "lossy"
                && let Some(spec) = o["spec"].as_object_mut()
            {
                spec.remove("replicas");
            }
            if behave == "rename" {
                let name = o["metadata"]["name"].as_str().unwrap_or_default();
                o["metadata"]["name"] = json!(format!("{name}-renamed"));
            }
            o
        })
        .collect();
    if behave == "drop" {
        converted.pop();
    }
    Ok(converted)
}
