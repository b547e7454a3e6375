//! An API as a value. Each wire API's folder declares one `Api`: its config
//! name, how a key from a variable is sent, its `tool_choice` form, its wire
//! form behind a member's transport, the settings hook that resolves what it
//! needs (endpoint, credentials) from a leaf-typed input, and the built-in
//! provider whose prices and defaults a named provider of it shares.
//! `apis.rs` lists them: a new API is a folder and one line there (and its
//! config name in `wire_api::API_NAMES`).

use serde_json::Value;

use super::adapter::HttpModel;
use super::http::{Auth, HttpTransport};
use super::spec::{ResolvedModel, ToolChoice, WireApi};
use crate::setup::{Env, SetupError};

/// How an API takes a provider's `tool_choice` (SPEC 3).
#[derive(Clone, Copy)]
pub(crate) enum ToolChoiceForm {
    /// The body's `tool_choice` field, in this form.
    Field(fn(ToolChoice) -> Value),
    /// Written by the API's own request builder (Converse's `toolChoice`,
    /// Google's `toolConfig`).
    Own,
    /// The API has none: a provider that sets one is a setup error.
    Refused,
}

/// What a named provider sets for its API (config `endpoint`, `region`,
/// ...), each winning over the environment; all `None` for a built-in
/// provider. Leaf-typed, so an API's hook never sees the config.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ApiInput<'a> {
    pub endpoint: Option<&'a str>,
    pub key_env: Option<&'a str>,
    pub region: Option<&'a str>,
    pub project: Option<&'a str>,
    pub profile: Option<&'a str>,
    pub api_version: Option<&'a str>,
}

/// An API's settings hook: fills in the member's endpoint and credentials
/// (SPEC 22) from `input` and the environment, or fails naming the member
/// (`what` names the setting) and every place looked in, never a value.
pub(crate) type Resolve =
    fn(&mut ResolvedModel, &ApiInput<'_>, Env, &str) -> Result<(), SetupError>;

/// One wire API.
pub(crate) struct Api {
    /// Its config `api:` name.
    pub name: WireApi,
    /// How a key from a variable (`api_key_env`, a row's key) is sent.
    pub key: Auth,
    pub tool_choice: ToolChoiceForm,
    /// The member's model: the API's wire form behind `transport`.
    pub build: fn(HttpTransport, &ResolvedModel) -> HttpModel,
    /// Its own settings, when it needs more than an endpoint and a key.
    pub resolve: Option<Resolve>,
    /// The built-in provider whose price table names a named provider of
    /// this API shares (a cloud's door); `None` where a server's prices
    /// are its own (the APIs gateways speak).
    pub home: Option<&'static str>,
}
