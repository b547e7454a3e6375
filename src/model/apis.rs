//! The table of APIs: every wire API's value (`api.rs`), one line each,
//! found by its config name.

pub(crate) use super::api::*;
use super::spec::WireApi;

/// Every API a provider may speak.
pub(crate) const APIS: &[&Api] = &[
    &super::openai::API,
    &super::responses::API,
    &super::anthropic::API,
    &super::ollama::API,
    &super::bedrock::API,
    &super::gemini::API,
    &super::vertex::API,
    &super::azure::API,
    &super::foundry::API,
];

/// The value of `api` (`None` for the offline scripted model).
pub(crate) fn of(api: WireApi) -> Option<&'static Api> {
    APIS.iter().copied().find(|a| a.name == api)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire_api::API_NAMES;

    #[test]
    fn every_config_name_has_one_value_and_every_value_a_name() {
        for name in API_NAMES {
            let api = WireApi::from_config(name).unwrap();
            assert_eq!(APIS.iter().filter(|a| a.name == api).count(), 1, "{name}");
        }
        for api in APIS {
            assert!(API_NAMES.contains(&api.name.config_name()));
        }
        assert!(of(WireApi::SCRIPT).is_none());
    }
}
