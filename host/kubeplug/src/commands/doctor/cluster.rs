//! The cluster itself: the kubeconfig loads, the API server answers, the
//! host's namespace exists, and kube-apiserver publishes the front proxy's
//! CA the aggregated API trusts.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Api;

use crate::args::ClusterArgs;
use kubeplug_api::requestheader::{self, RequestHeader};
use kubeplug_doctor::report::Check;

/// How long doctor waits to connect to the API server: a wrong address
/// should fail the check, not hang it for kube's default 30 s.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long doctor waits for one answer (the slowest it sends is a
/// SubjectAccessReview).
const READ_TIMEOUT: Duration = Duration::from_secs(15);

/// Connect as `args` say, pushing the `kubeconfig` and `API server` checks.
/// The client, or why every check that needs it is skipped.
pub async fn connect(args: &ClusterArgs, checks: &mut Vec<Check>) -> Result<kube::Client, String> {
    let mut config = match args.config().await {
        Ok(config) => config,
        Err(error) => {
            checks.push(Check::fail(
                "kubeconfig",
                format!(
                    "{error:#}: give --kubeconfig/--context, or set KUBECONFIG, as for kubectl"
                ),
            ));
            let why = "the kubeconfig did not load";
            checks.push(Check::skipped("API server", why));
            return Err(why.into());
        }
    };
    let url = config.cluster_url.to_string();
    checks.push(Check::ok(
        "kubeconfig",
        format!("context {}, cluster {url}", context_name(args)),
    ));
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    config.read_timeout = Some(READ_TIMEOUT);
    let client = match kube::Client::try_from(config) {
        Ok(client) => client,
        Err(error) => {
            checks.push(Check::fail(
                "API server",
                format!("cannot make a client for {url}: {error}: check the kubeconfig's cluster and user"),
            ));
            return Err("no client could be made".into());
        }
    };
    match client.apiserver_version().await {
        Ok(info) => {
            checks.push(Check::ok(
                "API server",
                format!("Kubernetes {} at {url}", info.git_version),
            ));
            Ok(client)
        }
        Err(error) => {
            checks.push(Check::fail(
                "API server",
                format!(
                    "GET {url}version failed: {error}: is the cluster up, and the kubeconfig's server address and credentials right?"
                ),
            ));
            Err("the API server did not answer".into())
        }
    }
}

/// The context the configuration came from, as far as can be told.
fn context_name(args: &ClusterArgs) -> String {
    use kube::config::Kubeconfig;
    if let Some(context) = &args.context {
        return context.clone();
    }
    let file = match &args.kubeconfig {
        Some(path) => Kubeconfig::read_from(path).ok(),
        None => Kubeconfig::read().ok(),
    };
    match file {
        Some(file) => file
            .current_context
            .unwrap_or_else(|| "(none current)".into()),
        None => "in-cluster (the pod's ServiceAccount)".into(),
    }
}

/// The pod's own namespace when doctor connects in-cluster (no
/// `--kubeconfig` or `--context`, no kubeconfig to find, as
/// [`ClusterArgs::config`] falls back): its ServiceAccount's namespace
/// file, as kube reads it. `None` elsewhere.
pub fn pod_namespace(args: &ClusterArgs) -> Option<String> {
    if args.kubeconfig.is_some()
        || args.context.is_some()
        || kube::config::Kubeconfig::read().is_ok()
    {
        return None;
    }
    kube::Config::incluster()
        .ok()
        .map(|config| config.default_namespace)
}

/// The host's namespace exists.
pub async fn namespace(client: &kube::Client, name: &str) -> Check {
    const CHECK: &str = "namespace";
    match Api::<Namespace>::all(client.clone()).get_opt(name).await {
        Ok(Some(_)) => Check::ok(CHECK, format!("{name} exists")),
        Ok(None) => Check::fail(
            CHECK,
            format!(
                "namespace {name} does not exist: apply deploy/base/namespace.yaml (or give -n the host's namespace)"
            ),
        ),
        Err(error) => Check::warn(CHECK, format!("cannot read namespace {name}: {error}")),
    }
}

/// kube-apiserver publishes the front proxy's CA (and the request headers)
/// that the aggregated API trusts requests by: ConfigMap
/// `kube-system/extension-apiserver-authentication`, read as the host reads
/// it.
pub async fn front_proxy_ca(client: &kube::Client) -> Check {
    const CHECK: &str = "front-proxy CA";
    let (namespace, name) = (requestheader::NAMESPACE, requestheader::NAME);
    let fix = "start kube-apiserver with --requestheader-client-ca-file, --requestheader-username-headers and --proxy-client-cert-file (the aggregation layer), or the aggregated API cannot trust the aggregator";
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    match api.get_opt(name).await {
        Ok(Some(map)) => front_proxy_data(&map.data.unwrap_or_default(), fix),
        Ok(None) => Check::fail(
            CHECK,
            format!("ConfigMap {namespace}/{name} does not exist: {fix}"),
        ),
        Err(error) => Check::warn(
            CHECK,
            format!("cannot read ConfigMap {namespace}/{name}: {error}"),
        ),
    }
}

fn front_proxy_data(data: &std::collections::BTreeMap<String, String>, fix: &str) -> Check {
    const CHECK: &str = "front-proxy CA";
    match RequestHeader::from_data(data) {
        Ok(header) => {
            let names = if header.allowed_names.is_empty() {
                "any proxy name".to_string()
            } else {
                format!("proxy names {}", header.allowed_names.join(", "))
            };
            Check::ok(
                CHECK,
                format!(
                    "requestheader-client-ca-file holds {} certificate(s); {names}",
                    header.client_ca.len()
                ),
            )
        }
        Err(reason) => Check::fail(
            CHECK,
            format!(
                "{}/{}: {reason}: {fix}",
                requestheader::NAMESPACE,
                requestheader::NAME
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeplug_doctor::report::Status;

    #[test]
    fn a_configmap_without_the_client_ca_fails_naming_the_key() {
        let check = front_proxy_data(&Default::default(), "the fix");
        assert_eq!(check.status, Status::Fail);
        assert!(
            check.detail.contains("no requestheader-client-ca-file")
                && check.detail.ends_with("the fix"),
            "{}",
            check.detail
        );
    }
}
