//! Which resource a request's path names: discovery, the `plugins`
//! collection or one of its objects, or a namespace's `previews`.

use crate::group::{DETAILS, GROUP, VERSION};

/// What a request asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Route {
    Health,
    Discovery(Discovery),
    List {
        watch: bool,
    },
    Get(String),
    /// `GET .../plugins/<name>/details`: the whole object, for callers who
    /// may `get` `plugins/details`.
    Details(String),
    /// `POST .../namespaces/<ns>/previews`.
    Preview {
        namespace: String,
    },
}

#[derive(Debug, PartialEq, Eq)]
pub enum Discovery {
    Groups,
    Group,
    Resources,
    OpenApiIndex,
    OpenApi,
    OpenApiV2,
}

pub fn route(path: &str, query: &str) -> Option<Route> {
    let watch = query
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1");
    let base = format!("/apis/{GROUP}/{VERSION}");
    Some(match path.trim_end_matches('/') {
        "/healthz" | "/livez" | "/readyz" => Route::Health,
        "/apis" => Route::Discovery(Discovery::Groups),
        "/openapi/v3" => Route::Discovery(Discovery::OpenApiIndex),
        "/openapi/v2" => Route::Discovery(Discovery::OpenApiV2),
        p if p == format!("/apis/{GROUP}") => Route::Discovery(Discovery::Group),
        p if p == base => Route::Discovery(Discovery::Resources),
        p if p == format!("/openapi/v3/apis/{GROUP}/{VERSION}") => {
            Route::Discovery(Discovery::OpenApi)
        }
        p if p.starts_with(&format!("{base}/namespaces/")) => {
            let rest = p.strip_prefix(&format!("{base}/namespaces/"))?;
            let (namespace, resource) = rest.split_once('/')?;
            (resource == "previews" && !namespace.is_empty()).then_some(())?;
            Route::Preview {
                namespace: namespace.into(),
            }
        }
        p => {
            let rest = p.strip_prefix(&base)?.strip_prefix("/plugins")?;
            match rest.strip_prefix('/') {
                None if rest.is_empty() => Route::List { watch },
                Some(name) if !name.is_empty() && !name.contains('/') => Route::Get(name.into()),
                Some(path) => match path.split_once('/') {
                    Some((name, DETAILS)) if !name.is_empty() => Route::Details(name.into()),
                    _ => return None,
                },
                _ => return None,
            }
        }
    })
}

pub fn query_param<'a>(query: &'a str, key: &str) -> Option<&'a str> {
    query
        .split('&')
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let base = "/apis/kubeplug.io/v1alpha1";
        assert_eq!(
            route(base, ""),
            Some(Route::Discovery(Discovery::Resources))
        );
        assert_eq!(
            route(&format!("{base}/plugins"), ""),
            Some(Route::List { watch: false })
        );
        assert_eq!(
            route(&format!("{base}/plugins"), "watch=true&resourceVersion=3"),
            Some(Route::List { watch: true })
        );
        assert_eq!(
            route(&format!("{base}/plugins/database"), ""),
            Some(Route::Get("database".into()))
        );
        assert_eq!(route(&format!("{base}/plugins/a/b"), ""), None);
        assert_eq!(
            route(&format!("{base}/plugins/a/details"), ""),
            Some(Route::Details("a".into()))
        );
        assert_eq!(route(&format!("{base}/plugins//details"), ""), None);
        assert_eq!(route(&format!("{base}/other"), ""), None);
        assert_eq!(
            route(&format!("{base}/namespaces/team-a/previews"), ""),
            Some(Route::Preview {
                namespace: "team-a".into()
            })
        );
        assert_eq!(
            route(&format!("{base}/namespaces/team-a/plugins"), ""),
            None
        );
        assert_eq!(route(&format!("{base}/namespaces//previews"), ""), None);
        assert_eq!(route("/apis/other.io/v1", ""), None);
        assert_eq!(
            route("/apis", ""),
            Some(Route::Discovery(Discovery::Groups))
        );
        assert_eq!(
            query_param("a=1&resourceVersion=12", "resourceVersion"),
            Some("12")
        );
    }
}
