//! Node identity: the creation order of a graph's nodes as graph-rt saw it, the handles a
//! capture gives back, and the pairing of two graphs' nodes that `cuGraphExecUpdate` makes.
//!
//! `cuGraphExecUpdate` pairs the nodes of the new graph with the exec's by creation order (CUDA
//! requires both graphs to have the same topology and node creation order). CUDA cannot report
//! that order, so graph-rt records it while it builds or captures a graph: every node made by
//! `Graph::add_*` or by a [`CaptureScope`](super::CaptureScope) operation. A graph with a node
//! graph-rt did not see (work queued on a capturing stream by other means, a wrapped raw graph)
//! has no known order; two such graphs still pair when both are single chains, where the
//! topology leaves one choice.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use graph_rt_sys::{CUgraph, CUgraphNode};

use super::graph::{edges_of, nodes_of, GraphHandle};
use super::retention::AddrMap;
use crate::error::{Error, Result};

/// A node recorded by a [`CaptureScope`](super::CaptureScope) operation: resolve it with
/// [`Graph::node`](super::Graph::node) on the graph the capture made (or captured into).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CapturedNode {
    pub(crate) capture: u64,
    pub(crate) index: usize,
}

/// The nodes of a graph in the order they were made, as far as graph-rt saw them.
#[derive(Debug, Default)]
pub(crate) struct Creation {
    pub(crate) nodes: Vec<CUgraphNode>,
    /// Every node of the graph is in `nodes`.
    pub(crate) complete: bool,
    /// Captures into the graph: (capture id, index in `nodes` of its first node).
    pub(crate) captures: Vec<(u64, usize)>,
}

impl Creation {
    /// An empty graph's: complete.
    pub(crate) fn empty() -> Self {
        Self {
            complete: true,
            ..Self::default()
        }
    }

    /// Adds the nodes a capture made (`seen`, or `None` where a capture operation's node could
    /// not be identified), given how many nodes the graph holds now.
    pub(crate) fn add_capture(&mut self, id: u64, seen: Vec<Option<CUgraphNode>>, total: usize) {
        self.captures.push((id, self.nodes.len()));
        let all_known = seen.iter().all(Option::is_some);
        self.nodes
            .extend(seen.into_iter().map(|n| n.unwrap_or(std::ptr::null_mut())));
        self.complete &= all_known && self.nodes.len() == total;
    }

    /// The node a capture handed back.
    pub(crate) fn captured(&self, node: CapturedNode) -> Option<CUgraphNode> {
        let (_, start) = self.captures.iter().find(|(id, _)| *id == node.capture)?;
        let raw = *self.nodes.get(start + node.index)?;
        (!raw.is_null()).then_some(raw)
    }
}

/// The nodes of a graph that is one chain (each node waits for at most one other and at most
/// one waits for it, all connected), in chain order; `None` for any other shape.
pub(crate) fn chain_order(graph: CUgraph, id: u64) -> Result<Option<Vec<CUgraphNode>>> {
    let nodes = nodes_of(graph, id)?;
    let edges = edges_of(graph, id)?;
    if nodes.is_empty() || edges.len() + 1 != nodes.len() {
        return Ok(nodes.is_empty().then(Vec::new));
    }
    let mut next = HashMap::with_capacity(edges.len());
    let mut has_pred = HashSet::with_capacity(edges.len());
    for e in &edges {
        if next.insert(e.from.raw as usize, e.to.raw).is_some()
            || !has_pred.insert(e.to.raw as usize)
        {
            return Ok(None);
        }
    }
    let mut roots = nodes
        .iter()
        .filter(|n| !has_pred.contains(&(n.raw as usize)));
    let (Some(root), None) = (roots.next(), roots.next()) else {
        return Ok(None);
    };
    let mut order = Vec::with_capacity(nodes.len());
    let mut at = Some(root.raw);
    while let Some(raw) = at {
        order.push(raw);
        at = next.get(&(raw as usize)).copied();
    }
    Ok((order.len() == nodes.len()).then_some(order))
}

/// The nodes of `a` and `b` that `cuGraphExecUpdate` pairs, in pairs `(a's, b's)`: by the
/// recorded creation orders when both are known, else by chain order when both graphs are
/// chains. Anything else is [`Error::NodeIdentityUnknown`].
pub(crate) fn pair(
    a: &GraphHandle,
    b: &GraphHandle,
    call: &'static str,
) -> Result<Vec<(CUgraphNode, CUgraphNode)>> {
    let creation = |g: &GraphHandle| -> Result<Option<Vec<CUgraphNode>>> {
        let _guard = g.lock(call)?;
        let c = g.creation.lock();
        Ok(c.complete.then(|| c.nodes.clone()))
    };
    let chain = |g: &GraphHandle| -> Result<Vec<CUgraphNode>> {
        let _guard = g.lock(call)?;
        chain_order(g.raw(), g.id)?.ok_or_else(|| unknown(call))
    };
    // Both orders recorded, or else both by chain order (a recorded order need not be the
    // chain's order: explicit graphs may add nodes in any order).
    let (a, b) = match (creation(a)?, creation(b)?) {
        (Some(a), Some(b)) => (a, b),
        _ => (chain(a)?, chain(b)?),
    };
    if a.len() != b.len() {
        return Err(unknown(call));
    }
    Ok(a.into_iter().zip(b).collect())
}

fn unknown(call: &'static str) -> Error {
    Error::NodeIdentityUnknown {
        call,
        reason: "the graphs' nodes cannot be paired with certainty: one of them has nodes \
                 graph-rt did not create or capture itself (so their creation order is unknown) \
                 and is not a single chain; rebind through the graph the exec now runs, or \
                 build both graphs through graph-rt"
            .into(),
    }
}

/// How the nodes of graphs other than the exec's own name its nodes (see `identity`): after an
/// in-place update, the update's graph holds the current parameters and its nodes name the
/// exec's; after a re-instantiation, the graph the exec ran before names the new one's nodes.
#[derive(Default)]
pub(crate) struct Identity {
    // The graph whose nodes hold the current parameters (after an in-place update).
    pub(crate) source: Option<Arc<GraphHandle>>,
    // A graph whose nodes are accepted for the exec's own.
    pub(crate) alias: Option<Arc<GraphHandle>>,
    // Filled on first use: own node -> source node, alias node -> own node.
    pub(crate) paired: bool,
    pub(crate) to_source: AddrMap<CUgraphNode>,
    pub(crate) from_alias: AddrMap<CUgraphNode>,
}

impl Identity {
    /// Pairs the exec's nodes with the other graph's, once after each update.
    pub(crate) fn pair(&mut self, own: &GraphHandle, call: &'static str) -> Result<()> {
        if self.paired {
            return Ok(());
        }
        let Some(other) = self.source.as_ref().or(self.alias.as_ref()) else {
            return Ok(());
        };
        for (o, t) in pair(own, other, call)? {
            if self.source.is_some() {
                self.to_source.insert(o as usize, t);
            }
            self.from_alias.insert(t as usize, o);
        }
        self.paired = true;
        Ok(())
    }

    pub(crate) fn reset(
        &mut self,
        source: Option<Arc<GraphHandle>>,
        alias: Option<Arc<GraphHandle>>,
    ) {
        *self = Identity {
            source,
            alias,
            ..Identity::default()
        };
    }
}
