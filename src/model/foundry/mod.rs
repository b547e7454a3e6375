//! Claude on Microsoft Foundry (SPEC 22): Anthropic Messages exactly as on
//! the Anthropic API (the `anthropic/` wire form, reused whole) at
//! `https://{resource}.services.ai.azure.com/anthropic` + `/v1/messages`.
//! `resolve.rs` finds the base and the credentials (`key.rs`: the key as
//! anthropic's own `AnthropicFoundry` client sends it; else a Microsoft
//! Entra ID token from Azure's credential chain).

mod key;
mod resolve;

use super::api::Api;
use super::spec::WireApi;

/// Foundry's value (`model/apis.rs`): Anthropic's wire form and
/// `tool_choice`, its own settings and prices (the `foundry` row).
pub(crate) const API: Api = Api {
    name: WireApi::named("foundry"),
    key: super::anthropic::API.key,
    tool_choice: super::anthropic::API.tool_choice,
    build: super::anthropic::API.build,
    resolve: Some(resolve::resolve),
    home: Some("foundry"),
};
