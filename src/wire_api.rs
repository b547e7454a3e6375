//! The wire vocabulary a provider is configured with: the `WireApi` it
//! speaks (config `api:`) and the `ToolChoice` it is sent (config
//! `tool_choice:`). A leaf module: the config types and the model layer
//! both speak it, and it imports nothing of ours.

/// The wire API a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WireApi {
    /// OpenAI Chat Completions (`…/chat/completions`).
    OpenAi,
    /// OpenAI Responses (`…/responses`).
    Responses,
    /// Anthropic Messages (`…/v1/messages`).
    Anthropic,
    /// Ollama (`…/api/chat`).
    Ollama,
    /// The Gemini API (`…/models/{model}:streamGenerateContent`).
    Gemini,
    /// Google Vertex AI: Claude through `:streamRawPredict`, Gemini through
    /// `:streamGenerateContent` (SPEC 22).
    Vertex,
    /// The offline scripted model.
    Script,
    /// Amazon Bedrock ConverseStream (`…/model/{id}/converse-stream`).
    Bedrock,
}

impl WireApi {
    /// The config `api:` value naming this API.
    pub(crate) fn config_name(self) -> &'static str {
        match self {
            WireApi::OpenAi => "openai",
            WireApi::Responses => "responses",
            WireApi::Anthropic => "anthropic",
            WireApi::Ollama => "ollama",
            WireApi::Script => "script",
            WireApi::Bedrock => "bedrock",
            WireApi::Gemini => "gemini",
            WireApi::Vertex => "vertex",
        }
    }

    /// Parses a config `api:` value (the scripted model is not one).
    pub(crate) fn from_config(name: &str) -> Option<WireApi> {
        match name {
            "openai" => Some(WireApi::OpenAi),
            "responses" => Some(WireApi::Responses),
            "anthropic" => Some(WireApi::Anthropic),
            "ollama" => Some(WireApi::Ollama),
            "bedrock" => Some(WireApi::Bedrock),
            "gemini" => Some(WireApi::Gemini),
            "vertex" => Some(WireApi::Vertex),
            _ => None,
        }
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
