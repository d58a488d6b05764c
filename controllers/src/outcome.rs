//! The bottom floor every controller stands on: how a failed reconcile is counted and retried,
//! and what happens after any reconcile. One place, so no controller can miss the backoff reset.

use std::sync::Arc;

use futures::future;
use kube::runtime::controller::{self, Action};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;

use crate::context::Context;
use crate::workqueue::Workqueue;

/// Errors that can name their kind with a bounded label.
pub(crate) trait ErrorKind {
    fn kind(&self) -> &'static str;
}

/// The error policy of every typed controller: count the failure by kind, back off per object.
pub(crate) fn error_policy<K, E>(
    controller: &'static str,
) -> impl Fn(Arc<K>, &E, Arc<Context>) -> Action
where
    K: kube::Resource<DynamicType = ()>,
    E: ErrorKind,
{
    move |obj, error, ctx| {
        ctx.failed(
            controller,
            error.kind(),
            &ObjectRef::from(obj.as_ref()).to_string(),
        )
    }
}

/// What a controller's `run` stream yields for each reconcile.
type RunResult<K, E> = Result<(ObjectRef<K>, Action), controller::Error<E, watcher::Error>>;

/// Logs failures (already counted and backed off), forgets the backoff of objects that
/// reconciled, and takes objects found gone out of the controller's queue.
pub(crate) fn after_reconcile<K, E>(
    ctx: Arc<Context>,
    queue: Workqueue,
) -> impl FnMut(RunResult<K, E>) -> future::Ready<()>
where
    K: kube::Resource,
    K::DynamicType: std::fmt::Debug,
    E: std::fmt::Display,
{
    move |result| {
        queue.outcome(&result);
        match result {
            Ok((object, _)) => {
                ctx.backoff.succeeded(&object.to_string());
                tracing::debug!(%object, "reconciled");
            }
            // The API server ends every long watch this way, and the watcher lists again.
            Err(controller::Error::QueueError(watcher::Error::WatchError(status)))
                if status.code == 410 =>
            {
                tracing::debug!(error = %status, "a watch expired; listing again");
            }
            Err(controller::Error::QueueError(e)) => {
                tracing::warn!(error = %e, "a watch failed; retrying");
            }
            Err(e) => tracing::warn!(error = %e, "reconcile failed"),
        }
        future::ready(())
    }
}
