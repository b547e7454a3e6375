//! The sandbox's domain allowlist: which hosts the filtering proxy lets
//! through. `crates.io` allows the host and its subdomains; `*.crates.io`
//! only subdomains; an IP address only itself.

/// Validated allowed hosts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Allowlist {
    entries: Vec<String>,
}

/// An allowlist entry that is not a bare host name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not a host name: give a domain such as crates.io (no scheme, port or path)")]
pub struct NotAHost(String);

impl Allowlist {
    /// Checks each entry is a bare host name (no scheme, port or path).
    pub fn parse(entries: &[String]) -> Result<Allowlist, NotAHost> {
        let mut clean = Vec::new();
        for entry in entries {
            let host = normalize(entry);
            let bare = host.strip_prefix("*.").unwrap_or(&host);
            let ok = !bare.is_empty()
                && !bare.starts_with('.')
                && !bare.starts_with('-')
                && bare
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':'))
                && (bare.parse::<std::net::IpAddr>().is_ok() || !bare.contains(':'));
            if !ok {
                return Err(NotAHost(entry.clone()));
            }
            clean.push(host);
        }
        Ok(Allowlist { entries: clean })
    }

    /// Whether `host` (as written in a request, brackets allowed) may be reached.
    pub fn allows(&self, host: &str) -> bool {
        let host = normalize(host);
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return false;
        }
        self.entries
            .iter()
            .any(|entry| match entry.strip_prefix("*.") {
                Some(domain) => host.ends_with(&format!(".{domain}")),
                None => {
                    host == entry
                        || (entry.parse::<std::net::IpAddr>().is_err()
                            && host.ends_with(&format!(".{entry}")))
                }
            })
    }
}

fn normalize(host: &str) -> String {
    host.trim().trim_end_matches('.').to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(entries: &[&str]) -> Allowlist {
        Allowlist::parse(&entries.iter().map(|e| e.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn a_domain_allows_itself_and_its_subdomains_only() {
        let allow = list(&["crates.io"]);
        assert!(allow.allows("crates.io"));
        assert!(allow.allows("static.crates.io"));
        assert!(allow.allows("Static.Crates.IO."));
        assert!(!allow.allows("evilcrates.io"));
        assert!(!allow.allows("crates.io.evil.com"));
        assert!(!allow.allows(""));
    }

    #[test]
    fn wildcards_allow_subdomains_only_and_ips_only_themselves() {
        let allow = list(&["*.example.com", "10.0.0.1", "::1"]);
        assert!(allow.allows("a.example.com"));
        assert!(!allow.allows("example.com"));
        assert!(allow.allows("10.0.0.1"));
        assert!(!allow.allows("110.0.0.1"));
        assert!(allow.allows("[::1]"));
    }

    #[test]
    fn urls_and_ports_are_refused() {
        for bad in [
            "https://crates.io",
            "crates.io:443",
            "crates.io/x",
            "",
            "*.",
            "a b",
        ] {
            assert!(Allowlist::parse(&[bad.to_string()]).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_empty_list_allows_nothing() {
        assert!(!Allowlist::default().allows("localhost"));
    }
}
