//! Building a graph node by node: kernels, copies, fills, empty nodes, events, child graphs,
//! host callbacks, graph memory, and the edges between them.

use std::ffi::c_void;
use std::sync::Arc;

use bytemuck::Pod;
use graph_rt_sys::{CUevent, CUgraph, CUgraphNode};

use super::graph::{raw_nodes, DriverResult, Graph, GraphAllocation};
use super::node::{copy_params, kernel_params, memset_params, EdgeKind, Node};
use crate::driver::{cu, cu_code, DeviceBuffer, Event, Function};
use crate::error::{Error, Misuse, Result};
use crate::launch::{check_layout, KernelArgs, LaunchConfig};
use crate::resource::Resource;

impl Graph {
    /// Adds a kernel node after `deps`, checking `args` against the kernel's parameter layout.
    ///
    /// # Safety
    /// As [`Stream::launch`](crate::Stream::launch), for every replay of the graph.
    pub unsafe fn add_kernel<A: KernelArgs>(
        &mut self,
        deps: &[Node],
        f: &Function,
        config: &LaunchConfig,
        args: A,
    ) -> Result<Node> {
        let handle = Arc::clone(&self.handle);
        let _guard = handle.lock("cuGraphAddKernelNode")?;
        self.ctx.bind()?;
        let layout = f.param_layout()?;
        let deps = raw_nodes(deps, self.handle.id, "cuGraphAddKernelNode")?;
        let node = args.with_params(|params, sizes| -> Result<CUgraphNode> {
            check_layout(f, layout, sizes, "cuGraphAddKernelNode")?;
            let p = kernel_params(f, config, params.as_mut_ptr());
            let mut node = std::ptr::null_mut();
            // SAFETY: `p` points at parameter values alive for this call (the driver copies them).
            unsafe {
                cu!(cuGraphAddKernelNode(
                    &mut node,
                    self.raw,
                    deps.as_ptr(),
                    deps.len(),
                    &p
                ))
            }?;
            Ok(node)
        })?;
        // The node exists from here on: record it and keep what it uses before anything else
        // can fail.
        self.handle.creation.lock().nodes.push(node);
        args.retain(self.kept());
        self.functions.insert(f.as_raw() as usize, f.clone());
        for attr in config.attributes() {
            // SAFETY: valid node and attribute value.
            unsafe { cu!(cuGraphKernelNodeSetAttribute(node, attr.id, &attr.value)) }?;
        }
        Ok(Node {
            raw: node,
            graph: self.handle.id,
        })
    }

    /// Adds one node after `deps` through `add`, which gets the out-pointer, the graph and the
    /// dependency list, with the graph locked and the context current.
    fn add_node(
        &mut self,
        call: &'static str,
        deps: &[Node],
        add: impl FnOnce(*mut CUgraphNode, CUgraph, *const CUgraphNode, usize) -> DriverResult,
    ) -> Result<Node> {
        let handle = Arc::clone(&self.handle);
        let _guard = handle.lock(call)?;
        self.ctx.bind()?;
        let deps = raw_nodes(deps, self.handle.id, call)?;
        let mut node = std::ptr::null_mut();
        add(&mut node, self.raw, deps.as_ptr(), deps.len())?.check()?;
        self.handle.creation.lock().nodes.push(node);
        Ok(Node {
            raw: node,
            graph: self.handle.id,
        })
    }

    /// Adds a device-to-device copy of all of `src` into `dst` (lengths must match).
    pub fn add_copy<T: Pod>(
        &mut self,
        deps: &[Node],
        dst: &DeviceBuffer<T>,
        src: &DeviceBuffer<T>,
    ) -> Result<Node> {
        let p = copy_params("cuGraphAddMemcpyNode", dst, src)?;
        let ctx = self.ctx.as_raw();
        // SAFETY: both allocations hold the bytes copied and are kept alive below.
        let node = self.add_node("cuGraphAddMemcpyNode", deps, |n, g, d, len| unsafe {
            cu_code!(cuGraphAddMemcpyNode(n, g, d, len, &p, ctx))
        })?;
        self.kept().extend([
            dst.allocation().clone() as Resource,
            src.allocation().clone(),
        ]);
        Ok(node)
    }

    /// Adds a node that sets every 32-bit word of `dst` to `value` (element size a multiple of 4).
    pub fn add_fill_u32<T: Pod>(
        &mut self,
        deps: &[Node],
        dst: &DeviceBuffer<T>,
        value: u32,
    ) -> Result<Node> {
        let (p, ctx) = (
            memset_params("cuGraphAddMemsetNode", dst, value)?,
            self.ctx.as_raw(),
        );
        // SAFETY: the allocation holds the words set and is kept alive below.
        let node = self.add_node("cuGraphAddMemsetNode", deps, |n, g, d, len| unsafe {
            cu_code!(cuGraphAddMemsetNode(n, g, d, len, &p, ctx))
        })?;
        self.kept().push(dst.allocation().clone());
        Ok(node)
    }

    /// Adds a node that does nothing: a join point.
    pub fn add_empty(&mut self, deps: &[Node]) -> Result<Node> {
        // SAFETY: valid out-pointer, graph and dependency list.
        self.add_node("cuGraphAddEmptyNode", deps, |n, g, d, len| unsafe {
            cu_code!(cuGraphAddEmptyNode(n, g, d, len))
        })
    }

    /// Adds a node that records `event`.
    pub fn add_event_record(&mut self, deps: &[Node], event: &Event) -> Result<Node> {
        let add = |n, g, d, len, e| {
            // SAFETY: add_event_node passes the graph, its lock held, valid dependencies and a
            // live event.
            unsafe { cu_code!(cuGraphAddEventRecordNode(n, g, d, len, e)) }
        };
        self.add_event_node("cuGraphAddEventRecordNode", deps, event, add)
    }

    /// Adds a node that waits for `event`.
    pub fn add_event_wait(&mut self, deps: &[Node], event: &Event) -> Result<Node> {
        let add = |n, g, d, len, e| {
            // SAFETY: as for add_event_record.
            unsafe { cu_code!(cuGraphAddEventWaitNode(n, g, d, len, e)) }
        };
        self.add_event_node("cuGraphAddEventWaitNode", deps, event, add)
    }

    /// Adds an event node through `add` (record or wait), keeping the event alive.
    fn add_event_node(
        &mut self,
        call: &'static str,
        deps: &[Node],
        event: &Event,
        add: impl FnOnce(*mut CUgraphNode, CUgraph, *const CUgraphNode, usize, CUevent) -> DriverResult,
    ) -> Result<Node> {
        let raw = event.as_raw();
        // The event is valid and kept alive below.
        let node = self.add_node(call, deps, |n, g, d, len| add(n, g, d, len, raw))?;
        self.kept().push(event.resource());
        Ok(node)
    }

    /// Adds a copy of `child` as one node; what `child` keeps alive, this graph keeps too.
    pub fn add_child_graph(&mut self, deps: &[Node], child: &Graph) -> Result<Node> {
        if child.launch_key.is_some() && self.launch_key.is_some() {
            return Err(Error::misuse(
                "cuGraphAddChildGraphNode",
                Misuse::SecondRefresh,
                "both graphs refresh an argument table: one refresh per graph",
            ));
        }
        child
            .handle
            .refuse_device_updatable("cuGraphAddChildGraphNode", "embed (clone) as a child")?;
        let _child_guard = child.handle.lock("cuGraphAddChildGraphNode")?;
        // SAFETY: valid graphs; the driver clones the child.
        let node = self.add_node("cuGraphAddChildGraphNode", deps, |n, g, d, len| unsafe {
            cu_code!(cuGraphAddChildGraphNode(n, g, d, len, child.raw))
        })?;
        self.kept().extend(child.keep.iter().cloned());
        self.functions
            .extend(child.functions.iter().map(|(k, f)| (*k, f.clone())));
        // Replays then go through the child's table, which refreshes before each launch.
        self.launch_key = self.launch_key.or(child.launch_key);
        Ok(node)
    }

    /// Adds a node that runs `callback` on a driver thread. It must not call CUDA; a panic in it
    /// is caught and discarded.
    pub fn add_host_callback<F: Fn() + Send + Sync + 'static>(
        &mut self,
        deps: &[Node],
        callback: F,
    ) -> Result<Node> {
        unsafe extern "C" fn trampoline<F: Fn()>(data: *mut c_void) {
            // SAFETY: `data` is the `Arc<F>` this graph keeps alive while the node exists.
            let f = unsafe { &*(data as *const F) };
            // A panic must not unwind into the driver.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        }
        let callback = Arc::new(callback);
        let p = graph_rt_sys::CUDA_HOST_NODE_PARAMS {
            fn_: Some(trampoline::<F>),
            userData: Arc::as_ptr(&callback) as *mut c_void,
        };
        // SAFETY: the callback outlives the node: the graph keeps it below.
        let node = self.add_node("cuGraphAddHostNode", deps, |n, g, d, len| unsafe {
            cu_code!(cuGraphAddHostNode(n, g, d, len, &p))
        })?;
        self.kept().push(callback);
        Ok(node)
    }

    /// Adds a node that allocates `bytes` of device memory from the graph's pool on each replay.
    pub fn add_mem_alloc(
        &mut self,
        deps: &[Node],
        bytes: usize,
    ) -> Result<(Node, GraphAllocation)> {
        let mut p = graph_rt_sys::CUDA_MEM_ALLOC_NODE_PARAMS::default();
        p.poolProps.allocType = graph_rt_sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        p.poolProps.location.type_ = graph_rt_sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        p.poolProps.location.id = self.ctx.device().as_raw();
        p.bytesize = bytes;
        // SAFETY: valid parameters; the driver writes p.dptr.
        let node = self.add_node("cuGraphAddMemAllocNode", deps, |n, g, d, len| unsafe {
            cu_code!(cuGraphAddMemAllocNode(n, g, d, len, &mut p))
        })?;
        let one_exec = &self.handle.one_exec;
        one_exec.store(true, std::sync::atomic::Ordering::Relaxed);
        Ok((node, GraphAllocation { ptr: p.dptr, bytes }))
    }

    /// Adds a node that frees a graph allocation.
    pub fn add_mem_free(&mut self, deps: &[Node], allocation: GraphAllocation) -> Result<Node> {
        // SAFETY: the driver checks that the address is a graph allocation.
        self.add_node("cuGraphAddMemFreeNode", deps, |n, g, d, len| unsafe {
            cu_code!(cuGraphAddMemFreeNode(n, g, d, len, allocation.ptr))
        })
    }

    /// Makes each node of `to` depend on the node of `from` at the same index.
    pub fn add_dependencies(&mut self, from: &[Node], to: &[Node]) -> Result<()> {
        // SAFETY: full dependencies order everything; no kernel contract changes.
        unsafe { self.add_dependencies_of_kind(from, to, EdgeKind::Full) }
    }

    /// Makes each node of `to` depend on the node of `from` at the same index, in the way `kind`
    /// says (`cuGraphAddDependencies_v2`). Programmatic and launch-order edges join two kernel
    /// nodes (the driver refuses others).
    ///
    /// # Safety
    /// With [`EdgeKind::Programmatic`] or [`EdgeKind::LaunchOrder`] the kernel of each `to` node
    /// may start before its `from` node has finished: it must execute `griddepcontrol.wait`
    /// (`cudaGridDependencySynchronize()`) before it reads anything the `from` kernel writes, as
    /// `kernels::CHAIN_PDL` does. [`EdgeKind::Full`] has no such contract.
    pub unsafe fn add_dependencies_of_kind(
        &mut self,
        from: &[Node],
        to: &[Node],
        kind: EdgeKind,
    ) -> Result<()> {
        const CALL: &str = "cuGraphAddDependencies";
        let handle = Arc::clone(&self.handle);
        let _guard = handle.lock(CALL)?;
        if from.len() != to.len() {
            let reason = format!("{} sources for {} targets", from.len(), to.len());
            let counts = Misuse::CountMismatch {
                expected: to.len(),
                got: from.len(),
            };
            return Err(Error::misuse(CALL, counts, reason));
        }
        let id = self.handle.id;
        let (f, t) = (raw_nodes(from, id, CALL)?, raw_nodes(to, id, CALL)?);
        let data = vec![graph_rt_sys::CUgraphEdgeData::from(kind); f.len()];
        // SAFETY: three equal-length arrays; nodes of this graph.
        unsafe {
            cu!(cuGraphAddDependencies_v2(
                self.raw,
                f.as_ptr(),
                t.as_ptr(),
                data.as_ptr(),
                f.len(),
            ))
        }
    }

    /// Replaces kernel node `node`'s kernel and arguments (`cuGraphKernelNodeSetParams`), with
    /// `config`'s grid, block and shared memory; the graph keeps what the arguments use.
    ///
    /// # Safety
    /// As [`Stream::launch`](crate::Stream::launch), for every replay.
    pub(crate) unsafe fn set_kernel<A: KernelArgs>(
        &mut self,
        node: Node,
        f: &Function,
        config: &LaunchConfig,
        args: A,
    ) -> Result<()> {
        const CALL: &str = "cuGraphKernelNodeSetParams";
        let handle = Arc::clone(&self.handle);
        let _guard = handle.lock(CALL)?;
        self.ctx.bind()?;
        let raw = node.raw_in(self.handle.id, CALL)?;
        let layout = f.param_layout()?;
        args.with_params(|params, sizes| -> Result<()> {
            check_layout(f, layout, sizes, CALL)?;
            let p = kernel_params(f, config, params.as_mut_ptr());
            // SAFETY: a kernel node of this locked graph; `p` points at parameter values alive
            // for this call (the driver copies them).
            unsafe { cu!(cuGraphKernelNodeSetParams(raw, &p)) }
        })?;
        args.retain(self.kept());
        self.functions.insert(f.as_raw() as usize, f.clone());
        Ok(())
    }
}
