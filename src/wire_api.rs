//! The wire vocabulary a provider is configured with: the `WireApi` it
//! speaks (config `api:`) and the `ToolChoice` it is sent (config
//! `tool_choice:`). A leaf module: the config types and the model layer
//! both speak it, and it imports nothing of ours. What an API does is its
//! value in `model/api.rs`'s table; here is only its config name.

/// The config `api:` names, in the order errors list them. One line per
/// API; its value (wire form, `tool_choice` form, settings hook) is the
/// line of the same name in `model/api.rs`'s `APIS`.
pub(crate) const API_NAMES: &[&str] = &[
    "openai",
    "responses",
    "anthropic",
    "ollama",
    "bedrock",
    "gemini",
    "vertex",
    "azure",
    "foundry",
];

/// The wire API a provider speaks, by its config name: a handle on one
/// value of `model/api.rs`'s table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct WireApi(&'static str);

impl WireApi {
    /// The offline scripted model (not a config `api:` value).
    pub(crate) const SCRIPT: WireApi = WireApi("script");

    /// The API named `name`, for the tables that declare the APIs (a name
    /// not in `API_NAMES` is caught by `model/api.rs`'s tests).
    pub(crate) const fn named(name: &'static str) -> WireApi {
        WireApi(name)
    }

    /// The config `api:` value naming this API.
    pub(crate) fn config_name(self) -> &'static str {
        self.0
    }

    /// Parses a config `api:` value (the scripted model is not one).
    pub(crate) fn from_config(name: &str) -> Option<WireApi> {
        API_NAMES.iter().find(|n| **n == name).map(|n| WireApi(n))
    }
}

/// A named provider's `tool_choice:` (SPEC 3): sent with every request that
/// offers tools, in the wire API's own form. Some self-hosted servers ignore
/// tools unless asked (llama-cpp-python's `chatml-function-calling`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ToolChoice {
    /// The model decides whether to call a tool.
    Auto,
    /// The model must call a tool (the run ends through `submit`).
    Required,
}
