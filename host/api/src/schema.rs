//! Schema pieces the served types share with the OpenAPI documents built
//! from them ([`crate::openapi`]), in a module of their own so that the
//! types need not import the documents that import them.

use schemars::Schema;

/// The schema of a field whose content is free-form (a report of the
/// host's, a parent object): an object whose fields are all kept, described
/// by its field's doc comment.
pub fn free_form(_: &mut schemars::SchemaGenerator) -> Schema {
    schemars::json_schema!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
}
