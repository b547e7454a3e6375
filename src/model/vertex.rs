//! Vertex AI as a value (`model/api.rs`, SPEC 22): a `claude…` model speaks
//! the Anthropic Messages form (`anthropic/`), a `gemini…` model the Gemini
//! form (`gemini/`), each at the publisher model's URL that settings made
//! (`settings/google.rs`), authorized by a Google token.

use super::adapter::HttpModel;
use super::api::{Api, ToolChoiceForm};
use super::http::{Auth, HttpTransport};
use super::spec::{ResolvedModel, WireApi};

/// Vertex AI's value. Settings let through `claude…` and `gemini…` models
/// only.
pub(crate) const API: Api = Api {
    name: WireApi::named("vertex"),
    key: Auth::Bearer,
    tool_choice: ToolChoiceForm::Own,
    build,
    resolve: None,
    home: Some("vertex"),
};

/// The publisher's form for the member's model.
fn build(transport: HttpTransport, resolved: &ResolvedModel) -> HttpModel {
    let model = resolved.spec.model();
    if model.starts_with("claude") {
        HttpModel::anthropic_on_vertex(transport, model, resolved.max_output_tokens)
    } else {
        HttpModel::gemini(transport, model, String::new(), resolved.max_output_tokens)
    }
}
