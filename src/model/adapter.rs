//! The one HTTP adapter. `HttpModel` is a model behind one transport with
//! what every wire API shares (the model's name, its configured reply cap,
//! the provider's `stream` and `tool_choice` options); its `WireForm` knows
//! one API: the path, the request body, how the reply is framed and
//! assembled, and what the API adds (Azure's price by the answering model).
//! Each wire API's folder holds its form (`openai/`, `responses/`,
//! `anthropic/`, `ollama.rs`, `gemini/`, `azure/`, `bedrock/`), so a new API
//! is one more form and one registry arm.

use async_trait::async_trait;

use super::http::HttpTransport;
use super::spec::WireOptions;
use super::{Model, ModelError, Request, Response, StreamObserver};

/// What a wire form is given for one request.
pub(crate) struct Call<'a> {
    pub transport: &'a HttpTransport,
    /// The model's name as the API takes it (a deployment on Azure, a model
    /// id on Bedrock).
    pub model: &'a str,
    pub request: &'a Request<'a>,
    /// The model's configured `max_output_tokens`, for a request without one.
    pub output_cap: Option<u32>,
    pub wire: WireOptions,
    pub observer: &'a dyn StreamObserver,
}

/// One wire API: sends a call's request in its form and assembles the reply.
#[async_trait]
pub(crate) trait WireForm: Send + Sync + std::fmt::Debug {
    async fn exchange(&self, call: Call<'_>) -> Result<Response, ModelError>;
}

/// A model behind one HTTP transport, speaking one wire form.
#[derive(Debug)]
pub struct HttpModel {
    transport: HttpTransport,
    model: String,
    output_cap: Option<u32>,
    wire: WireOptions,
    form: Box<dyn WireForm>,
}

impl HttpModel {
    /// `model` behind `transport`, speaking `form`, with the default wire
    /// options (streamed, `tool_choice` as the API's default).
    pub(crate) fn new(
        transport: HttpTransport,
        model: &str,
        output_cap: Option<u32>,
        form: impl WireForm + 'static,
    ) -> Self {
        HttpModel {
            transport,
            model: model.to_string(),
            output_cap,
            wire: WireOptions::default(),
            form: Box::new(form),
        }
    }

    /// Sends requests as the provider's config asks (`stream`, `tool_choice`).
    pub(crate) fn with_wire(mut self, wire: WireOptions) -> Self {
        self.wire = wire;
        self
    }
}

#[async_trait]
impl Model for HttpModel {
    async fn complete(
        &self,
        request: &Request<'_>,
        observer: &dyn StreamObserver,
    ) -> Result<Response, ModelError> {
        self.form
            .exchange(Call {
                transport: &self.transport,
                model: &self.model,
                request,
                output_cap: self.output_cap,
                wire: self.wire,
                observer,
            })
            .await
    }
}
