//! `budgets:` resolved (SPEC 19): each `model` a spec of a known provider,
//! each `provider` a known one, and no period and scope given twice (two
//! budgets with one key would count every response twice). The amount,
//! the period and unknown keys are checked as each file is read
//! (`config.rs`), so those errors name the file.

use std::collections::BTreeMap;

use crate::budget::{Budget, Scope};
use crate::config::{BudgetConfig, ProviderConfig};
use crate::model::spec::{builtin, ModelSpec, BUILTIN_PROVIDERS};
use crate::setup::SetupError;

/// The configured budgets, in config order.
pub(super) fn resolve(
    config: Option<&[BudgetConfig]>,
    providers: &BTreeMap<String, ProviderConfig>,
) -> Result<Vec<Budget>, SetupError> {
    let mut budgets: Vec<Budget> = Vec::new();
    for (i, entry) in config.unwrap_or_default().iter().enumerate() {
        let at = |field: &str, message: String| {
            SetupError(format!("config budgets[{i}]{field}: {message}"))
        };
        let scope = match (&entry.model, &entry.provider) {
            (Some(text), _) => {
                let spec = ModelSpec::parse(text.trim()).map_err(|_| {
                    at(
                        ".model",
                        format!("'{text}' is not a model spec (<provider>/<model>)"),
                    )
                })?;
                known_provider(spec.provider(), providers)
                    .map_err(|m| at(".model", m.to_string()))?;
                Scope::Model(spec.as_str().to_string())
            }
            (None, Some(name)) => {
                let name = name.trim();
                known_provider(name, providers).map_err(|m| at(".provider", m.to_string()))?;
                Scope::Provider(name.to_string())
            }
            (None, None) => Scope::Fleet,
        };
        let budget = Budget {
            usd: entry.usd,
            per: entry.per,
            scope,
        };
        if let Some(j) = budgets.iter().position(|b| b.key() == budget.key()) {
            return Err(at(
                "",
                format!(
                    "budgets[{j}] already caps this period and scope ({}): give one amount",
                    budget.key()
                ),
            ));
        }
        budgets.push(budget);
    }
    Ok(budgets)
}

/// A provider neither built in nor configured, with the closest known name.
#[derive(Debug, thiserror::Error)]
#[error("unknown provider '{name}'{hint}")]
struct UnknownProvider {
    name: String,
    hint: String,
}

/// `Ok` when `name` is a built-in or configured provider.
fn known_provider(
    name: &str,
    providers: &BTreeMap<String, ProviderConfig>,
) -> Result<(), UnknownProvider> {
    if builtin(name).is_some() || providers.contains_key(name) {
        return Ok(());
    }
    let known = BUILTIN_PROVIDERS
        .iter()
        .map(|b| b.name)
        .chain(providers.keys().map(String::as_str));
    let hint = crate::suggest::closest(name, known)
        .map(|s| format!(" (did you mean '{s}'?)"))
        .unwrap_or_default();
    Err(UnknownProvider {
        name: name.to_string(),
        hint,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::Period;

    fn entry(model: Option<&str>, provider: Option<&str>) -> BudgetConfig {
        BudgetConfig {
            usd: 5.0,
            per: Period::Day,
            model: model.map(str::to_string),
            provider: provider.map(str::to_string),
        }
    }

    #[test]
    fn scopes_are_checked_and_repeats_refused() {
        let none = BTreeMap::new();
        let ok = resolve(
            Some(&[
                entry(None, None),
                entry(Some("openai/gpt-5"), None),
                entry(None, Some("anthropic")),
            ]),
            &none,
        )
        .unwrap();
        assert_eq!(ok[1].scope, Scope::Model("openai/gpt-5".into()));
        assert_eq!(ok[2].scope, Scope::Provider("anthropic".into()));
        let e = resolve(Some(&[entry(Some("gpt-5"), None)]), &none).unwrap_err();
        assert_eq!(
            e.0,
            "config budgets[0].model: 'gpt-5' is not a model spec (<provider>/<model>)"
        );
        let e = resolve(Some(&[entry(None, Some("opneai"))]), &none).unwrap_err();
        assert_eq!(
            e.0,
            "config budgets[0].provider: unknown provider 'opneai' (did you mean 'openai'?)"
        );
        let e = resolve(Some(&[entry(None, None), entry(None, None)]), &none).unwrap_err();
        assert!(
            e.0.starts_with("config budgets[1]: budgets[0] already caps"),
            "{e}"
        );
    }
}
