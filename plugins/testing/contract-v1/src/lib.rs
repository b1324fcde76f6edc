//! A test guest built against `kubeplug:plugin@1.0.0`: `wit/plugin.wit` here is
//! the host's contract with only the package version changed. The host speaks
//! 0.1.0 and must refuse this component with `LoadError::WrongContract`
//! before linking; none of these functions is ever meant to run.

wit_bindgen::generate!({
    path: "wit",
    world: "plugin",
});

use exports::kubeplug::plugin::reconciler::Guest;
use kubeplug::plugin::types::{Error, FinalizeResponse, PluginManifest, Request, Response};

struct ContractV1;

const REFUSED: &str = "contract-v1 is a test guest and does nothing";

impl Guest for ContractV1 {
    fn manifest(_config: String) -> Result<PluginManifest, Error> {
        Err(Error::Failed(REFUSED.into()))
    }

    fn reconcile(_request: Request) -> Result<Response, Error> {
        Err(Error::Failed(REFUSED.into()))
    }

    fn finalize(_request: Request) -> Result<FinalizeResponse, Error> {
        Err(Error::Failed(REFUSED.into()))
    }
}

export!(ContractV1);
