//! The API group and version every object and path of the API names.

pub const GROUP: &str = "kubeplug.io";
pub const VERSION: &str = "v1alpha1";
/// `GROUP/VERSION`, as the group's objects carry it.
pub const API_VERSION: &str = "kubeplug.io/v1alpha1";

/// The subresource of `plugins` whose `get` shows a plugin's error texts and
/// shadow examples (which may quote cluster data a plugin was handed).
pub const DETAILS: &str = "details";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_version_is_the_group_and_version() {
        assert_eq!(API_VERSION, format!("{GROUP}/{VERSION}"));
    }
}
