//! The cloud regions this release knows (SPEC 22 "Validation"): the AWS
//! Regions (Amazon Bedrock's runtime among them) and the Google Cloud
//! locations Vertex AI serves models in. A region that is not here gets a
//! `warning` naming the closest known one, and the request is still made:
//! new regions open, and a typo such as `us-east-7` otherwise reads as an
//! outage. A leaf: it imports nothing of ours.

/// AWS Regions (the commercial and GovCloud partitions, and China's): a
/// Bedrock region is one of these, as listed in Amazon Bedrock's "Regional
/// availability by endpoints" and the AWS Regions list.
const AWS: &[&str] = &[
    "us-east-1",
    "us-east-2",
    "us-west-1",
    "us-west-2",
    "us-gov-east-1",
    "us-gov-west-1",
    "ca-central-1",
    "ca-west-1",
    "mx-central-1",
    "sa-east-1",
    "eu-central-1",
    "eu-central-2",
    "eu-north-1",
    "eu-south-1",
    "eu-south-2",
    "eu-west-1",
    "eu-west-2",
    "eu-west-3",
    "il-central-1",
    "me-central-1",
    "me-south-1",
    "af-south-1",
    "ap-east-1",
    "ap-east-2",
    "ap-northeast-1",
    "ap-northeast-2",
    "ap-northeast-3",
    "ap-south-1",
    "ap-south-2",
    "ap-southeast-1",
    "ap-southeast-2",
    "ap-southeast-3",
    "ap-southeast-4",
    "ap-southeast-5",
    "ap-southeast-6",
    "ap-southeast-7",
    "cn-north-1",
    "cn-northwest-1",
];

/// Vertex AI's locations: `global` and the Google Cloud regions of
/// "Generative AI on Vertex AI locations" and "Vertex AI locations".
const GOOGLE: &[&str] = &[
    "global",
    "us-central1",
    "us-east1",
    "us-east4",
    "us-east5",
    "us-south1",
    "us-west1",
    "us-west2",
    "us-west3",
    "us-west4",
    "northamerica-northeast1",
    "northamerica-northeast2",
    "southamerica-east1",
    "southamerica-west1",
    "europe-central2",
    "europe-north1",
    "europe-north2",
    "europe-southwest1",
    "europe-west1",
    "europe-west2",
    "europe-west3",
    "europe-west4",
    "europe-west6",
    "europe-west8",
    "europe-west9",
    "europe-west10",
    "europe-west12",
    "asia-east1",
    "asia-east2",
    "asia-northeast1",
    "asia-northeast2",
    "asia-northeast3",
    "asia-south1",
    "asia-south2",
    "asia-southeast1",
    "asia-southeast2",
    "australia-southeast1",
    "australia-southeast2",
    "me-central1",
    "me-central2",
    "me-west1",
    "africa-south1",
];

/// Which cloud's regions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cloud {
    /// Amazon Bedrock: AWS Regions.
    Aws,
    /// Vertex AI: Google Cloud locations.
    Google,
}

impl Cloud {
    fn known(self) -> &'static [&'static str] {
        match self {
            Cloud::Aws => AWS,
            Cloud::Google => GOOGLE,
        }
    }

    /// What the cloud calls it.
    fn word(self) -> &'static str {
        match self {
            Cloud::Aws => "AWS region",
            Cloud::Google => "Vertex AI location",
        }
    }
}

/// The known region closest to `region` (by Jaro-Winkler, as `suggest`
/// measures typos), or `None` when `region` is known.
pub(crate) fn unknown(cloud: Cloud, region: &str) -> Option<&'static str> {
    let known = cloud.known();
    if known.contains(&region) {
        return None;
    }
    let lower = region.to_ascii_lowercase();
    // The first of the closest: `us-east-7` is `us-east-1`, not `-2`.
    let mut best: Option<(f64, &'static str)> = None;
    for k in known {
        let score = strsim::jaro_winkler(&lower, k);
        if best.is_none_or(|(top, _)| score > top) {
            best = Some((score, k));
        }
    }
    best.map(|(_, k)| k)
}

/// The warning for a member whose region this release does not know:
/// `model <spec>: AWS region 'us-east-7' is not one tinyagent knows (did
/// you mean 'us-east-1'?); the request is still made`.
pub(crate) fn warning(cloud: Cloud, spec: &str, region: &str) -> Option<String> {
    let closest = unknown(cloud, region)?;
    Some(format!(
        "model {spec}: {} '{region}' is not one tinyagent knows (did you mean '{closest}'?); requests go to it all the same",
        cloud.word()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_regions_pass_and_typos_name_the_closest() {
        assert_eq!(unknown(Cloud::Aws, "us-east-1"), None);
        assert_eq!(unknown(Cloud::Aws, "us-east-7"), Some("us-east-1"));
        assert_eq!(unknown(Cloud::Aws, "eu-wset-1"), Some("eu-west-1"));
        assert_eq!(unknown(Cloud::Google, "global"), None);
        assert_eq!(unknown(Cloud::Google, "us-east5"), None);
        assert_eq!(unknown(Cloud::Google, "us-east-5"), Some("us-east5"));
        assert_eq!(unknown(Cloud::Google, "europe-wst4"), Some("europe-west4"));
        let w = warning(Cloud::Aws, "bedrock/m", "us-east-7").unwrap();
        assert_eq!(
            w,
            "model bedrock/m: AWS region 'us-east-7' is not one tinyagent knows (did you mean 'us-east-1'?); requests go to it all the same"
        );
    }
}
