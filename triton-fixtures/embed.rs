// The Triton fixtures (triton-fixtures/*, made by make.py on an H200), embedded at compile time
// so that tests and examples never read the source tree at run time. `include!` this file after
// defining `triton_fixtures_dir!()` to expand to the folder's path (a literal ending in `/`).

/// One fixture: Triton's cache files for the kernel, the manifest, and the buffers' bytes
/// before and after Triton's own launch.
#[allow(dead_code)]
pub struct TritonFixture {
    pub name: &'static str,
    pub kernel: &'static str,
    pub json: &'static str,
    pub ptx: &'static str,
    pub cubin: &'static [u8],
    pub ttir: &'static str,
    pub manifest: &'static str,
    pub buffers: &'static [u8],
}

macro_rules! triton_fixture {
    ($name:literal, $kernel:literal) => {
        TritonFixture {
            name: $name,
            kernel: $kernel,
            json: include_str!(concat!(triton_fixtures_dir!(), $name, "/", $kernel, ".json")),
            ptx: include_str!(concat!(triton_fixtures_dir!(), $name, "/", $kernel, ".ptx")),
            cubin: include_bytes!(concat!(triton_fixtures_dir!(), $name, "/", $kernel, ".cubin")),
            ttir: include_str!(concat!(triton_fixtures_dir!(), $name, "/", $kernel, ".ttir")),
            manifest: include_str!(concat!(triton_fixtures_dir!(), $name, "/manifest.json")),
            buffers: include_bytes!(concat!(triton_fixtures_dir!(), $name, "/buffers.bin")),
        }
    };
}

#[allow(dead_code)]
pub const TRITON_FIXTURES: &[TritonFixture] = &[
    triton_fixture!("add", "add_kernel"),
    triton_fixture!("add_nodiv", "add_kernel"),
    triton_fixture!("scaled_masked", "scaled_kernel"),
    triton_fixture!("row_sum", "row_sum_kernel"),
    triton_fixture!("softmax", "softmax_kernel"),
    triton_fixture!("layernorm", "layernorm_kernel"),
    triton_fixture!("matmul_autotuned", "matmul_kernel"),
    triton_fixture!("matmul_smem96k", "matmul_kernel"),
    triton_fixture!("gdc_add1", "gdc_add1_kernel"),
    triton_fixture!("add_cluster2", "add_kernel"),
    triton_fixture!("scale_bf16", "scale_bf16_kernel"),
];
