//! Whether this identity may do something, asked of the API server before doing it: an operator
//! whose RBAC arrives after the objects it acts on (a Helm upgrade applies CRDs first) waits or
//! skips instead of meeting a stream of 403s.

pub use k8s_openapi::api::authorization::v1::ResourceAttributes;
use k8s_openapi::api::authorization::v1::{SelfSubjectAccessReview, SelfSubjectAccessReviewSpec};
use kube::Api;
use kube::api::PostParams;

/// The API server's answer for `attributes`, or the error when it could not be asked.
pub async fn allowed(
    client: &kube::Client,
    attributes: ResourceAttributes,
) -> Result<bool, kube::Error> {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(attributes),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let answer = Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}
