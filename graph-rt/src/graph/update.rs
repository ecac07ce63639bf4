//! Updating an exec from another graph: in place (`cuGraphExecUpdate`) when the driver can, by
//! re-instantiation otherwise.

use graph_rt_sys::CUgraphExecUpdateResult as R;

use super::exec::instantiate_raw;
use super::graph::{Graph, Node};
use super::GraphExec;
use crate::driver::{cu, cu_code};
use crate::error::{Error, Result};

/// Why `cuGraphExecUpdate` could not apply a graph to an exec (`CUgraphExecUpdateResult`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateFailureKind {
    /// Invalid value, or another error.
    Error,
    /// Nodes or edges were added or removed.
    TopologyChanged,
    /// A node's type changed.
    NodeTypeChanged,
    /// A kernel node's function changed.
    FunctionChanged,
    /// A parameter changed in a way an update cannot apply.
    ParametersChanged,
    /// Something else the update does not support.
    NotSupported,
    /// The function changed in an unsupported way (e.g. cooperative launch).
    UnsupportedFunctionChange,
    /// A node attribute changed in an unsupported way.
    AttributesChanged,
    /// The exec's graph or the new one has device-updatable kernel nodes (an in-graph
    /// prelude): CUDA supports no whole-graph update of such graphs. Nothing was called.
    DeviceUpdatable,
    /// A result this header does not know.
    Other(u32),
}

/// A failed exec update: why, and at which node of the new graph (and of the exec's graph).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("cuGraphExecUpdate could not update the exec: {kind:?} (node {node:?}, paired with {from_node:?})")]
pub struct UpdateFailure {
    /// Why.
    pub kind: UpdateFailureKind,
    /// The node of the new graph where the update failed, if the driver names one.
    pub node: Option<Node>,
    /// The node of the exec's graph it was paired with, if any.
    pub from_node: Option<Node>,
}

/// What [`GraphExec::update`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecUpdate {
    /// The exec was updated in place.
    Updated,
    /// The update was refused; the exec was instantiated anew from the graph.
    Reinstantiated(UpdateFailure),
}

impl GraphExec {
    /// Updates the exec in place from `graph`, which must have the same topology as the exec's
    /// graph (`cuGraphExecUpdate`). On failure nothing changed and the failure says why.
    pub fn try_update(&mut self, graph: &Graph) -> std::result::Result<(), UpdateFailure> {
        let fail = |kind| UpdateFailure {
            kind,
            node: None,
            from_node: None,
        };
        let error = |_: Error| fail(UpdateFailureKind::Error);
        if self.graph.is_device_updatable() || graph.handle.is_device_updatable() {
            return Err(fail(UpdateFailureKind::DeviceUpdatable));
        }
        self.ctx.bind().map_err(error)?;
        let mut info = graph_rt_sys::CUgraphExecUpdateResultInfo::default();
        let r = {
            let _guard = graph.handle.lock("cuGraphExecUpdate").map_err(error)?;
            // SAFETY: valid exec, graph and out-pointer.
            unsafe { cu_code!(cuGraphExecUpdate(self.raw, graph.raw, &mut info)) }
        };
        if r.is_ok_and(|r| r.ok()) {
            self.updates.set(self.updates.get() + 1);
            self.absorb(graph);
            let h = graph.handle.clone();
            self.identity.reset(Some(h.clone()), Some(h));
            return Ok(());
        }
        let kind = match info.result {
            R::CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED => UpdateFailureKind::TopologyChanged,
            R::CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED => UpdateFailureKind::NodeTypeChanged,
            R::CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED => UpdateFailureKind::FunctionChanged,
            R::CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED => {
                UpdateFailureKind::ParametersChanged
            }
            R::CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED => UpdateFailureKind::NotSupported,
            R::CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE => {
                UpdateFailureKind::UnsupportedFunctionChange
            }
            R::CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED => {
                UpdateFailureKind::AttributesChanged
            }
            R::CU_GRAPH_EXEC_UPDATE_ERROR | R::CU_GRAPH_EXEC_UPDATE_SUCCESS => {
                UpdateFailureKind::Error
            }
            other => UpdateFailureKind::Other(other.0),
        };
        let node = |raw: graph_rt_sys::CUgraphNode, graph: u64| {
            (!raw.is_null()).then_some(Node { raw, graph })
        };
        Err(UpdateFailure {
            kind,
            node: node(info.errorNode, graph.handle.id),
            from_node: node(info.errorFromNode, self.graph.id),
        })
    }

    /// Updates the exec from `graph` in place when the driver can, and otherwise instantiates
    /// `graph` anew (with the exec's options) in its place.
    ///
    /// Refused for graphs with device-updatable nodes (an installed prelude): CUDA supports
    /// neither the update nor a second exec of such a graph.
    pub fn update(&mut self, graph: &Graph) -> Result<ExecUpdate> {
        self.graph
            .refuse_device_updatable("cuGraphExecUpdate", "update an exec of")?;
        graph
            .handle
            .refuse_device_updatable("cuGraphExecUpdate", "update an exec from")?;
        match self.try_update(graph) {
            Ok(()) => Ok(ExecUpdate::Updated),
            Err(failure) => {
                let raw = instantiate_raw(graph, self.flags, None)?;
                // Launches of the new exec are not ordered after those of the old one: wait for
                // the old one's last launch before anything it uses may be released.
                if let Err(e) = self.wait_last_launch() {
                    // SAFETY: made just above, never launched.
                    let r = unsafe { cu!(cuGraphExecDestroy(raw)) };
                    self.ctx.inner.record(r);
                    return Err(e);
                }
                // SAFETY: we own the old exec, which no launch uses any more.
                let r = unsafe { cu!(cuGraphExecDestroy(self.raw)) };
                self.ctx.inner.record(r);
                self.raw = raw;
                self.updates.set(self.updates.get() + 1);
                self.absorb(graph);
                // The graph the exec ran before names the new exec's nodes, unless the topology
                // changed (then its nodes have no counterparts).
                let before = self
                    .identity
                    .source
                    .take()
                    .unwrap_or_else(|| self.graph.clone());
                let alias = (failure.kind != UpdateFailureKind::TopologyChanged).then_some(before);
                // The exec now belongs to `graph`: move it between the graphs' exec counts.
                self.graph
                    .execs
                    .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
                graph
                    .handle
                    .execs
                    .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                self.graph = graph.handle.clone();
                self.identity.reset(None, alias);
                Ok(ExecUpdate::Reinstantiated(failure))
            }
        }
    }

    /// Waits for the last launch of this exec (launches of one exec run in order). Only once
    /// that succeeded is the exec known idle.
    pub(super) fn wait_last_launch(&mut self) -> Result<()> {
        if let Some(stream) = self.last_stream.get_mut() {
            stream.synchronize()?;
            *self.last_stream.get_mut() = None;
            self.last_raw.set(0);
            self.retention.idle();
        }
        Ok(())
    }
}
