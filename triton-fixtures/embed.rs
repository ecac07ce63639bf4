// The Triton fixtures (triton-fixtures/*, made by make.py on an H200), embedded at compile time
// so that tests and examples never read the source tree at run time. `include!` this file after
// defining `triton_fixtures_dir!()` to expand to the folder's path (a literal ending in `/`), with
// `TritonFiles` and `TritonArg` (`graph_rt::triton`) in scope and serde_json and half dependencies.

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

#[allow(dead_code)]
impl TritonFixture {
    /// The fixture's cache files, as `TritonFiles::read` would give them.
    pub fn files(&self) -> TritonFiles {
        TritonFiles {
            metadata: self.json.into(),
            ptx: Some(self.ptx.into()),
            cubin: Some(self.cubin.to_vec()),
            ttir: Some(self.ttir.into()),
        }
    }

    /// The manifest.
    pub fn manifest(&self) -> serde_json::Value {
        serde_json::from_str(self.manifest).expect("a fixture's manifest is JSON")
    }

    /// A scalar argument of the manifest, as Triton's launcher passed it.
    pub fn scalar(arg: &serde_json::Value) -> TritonArg<'static> {
        Self::try_scalar(arg).unwrap_or_else(|| panic!("fixture argument {arg}"))
    }

    /// [`TritonFixture::scalar`], `None` for a type or value it cannot pass (a manifest of
    /// scripts/inductor_cases.py may hold any scalar type of Triton's signatures).
    pub fn try_scalar(arg: &serde_json::Value) -> Option<TritonArg<'static>> {
        let v = &arg["value"];
        let (int, uint, float) = (v.as_i64(), v.as_u64(), v.as_f64());
        match arg["type"].as_str().unwrap_or_default() {
            "i8" => int.map(|x| TritonArg::i8(x as i8)),
            "u8" => uint.map(|x| TritonArg::u8(x as u8)),
            "i16" => int.map(|x| TritonArg::i16(x as i16)),
            "u16" => uint.map(|x| TritonArg::u16(x as u16)),
            "i32" => int.map(|x| TritonArg::i32(x as i32)),
            "u32" => uint.map(|x| TritonArg::u32(x as u32)),
            "i64" => int.map(TritonArg::i64),
            "u64" => uint.or(int.map(|x| x as u64)).map(TritonArg::u64),
            "fp16" => float.map(|x| TritonArg::f16_bits(half::f16::from_f64(x).to_bits())),
            "bf16" => float.map(|x| TritonArg::bf16_bits(half::bf16::from_f64(x).to_bits())),
            "fp32" => float.map(|x| TritonArg::f32(x as f32)),
            "fp64" => float.map(TritonArg::f64),
            "i1" | "u1" => v.as_bool().or(int.map(|x| x != 0)).map(TritonArg::bool),
            _ => None,
        }
    }
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
