-- fhelium: the Lua front end of the fhelium engine.
--   local fh = require "fhelium"
-- The C module `fhelium.core` owns tensors, memory, streams and kernels; this
-- file assembles the public table (docs/api.md) from it and the Lua-side modules.
local core = require "fhelium.core"

local fh = {}
fh.core = core
fh._VERSION = core.info().version

fh.errors = require "fhelium.errors"

-- host threads of the CPU kernels (FHELIUM_NUM_THREADS; results never depend on them)
fh.num_threads = core.num_threads
fh.set_num_threads = core.set_num_threads
fh.cpu_simd = core.cpu_simd
fh._set_cpu_simd = core._set_cpu_simd
-- fault builds only (-DFHELIUM_FAULTS=ON, docs/faults.md): counters and arming; nil otherwise
fh._faults = core._faults
fh._faults_arm = core._faults_arm

-- tensors -----------------------------------------------------------------
local tensor = require "fhelium.tensor"
for _, name in ipairs {
  "tensor", "empty", "zeros", "ones", "full", "arange", "rand", "randn", "Generator",
  "add", "sub", "mul", "div", "neg", "sum", "equal", "allclose", "max_abs_diff", "is_tensor",
} do
  fh[name] = core[name]
end
fh.rns = {
  add = core.rns_add, sub = core.rns_sub, mul = core.rns_mul, neg = core.rns_neg,
}
fh.dtypes = { "bool", "uint8", "int32", "int64", "uint32", "uint64", "float32", "float64", "complex128" }
fh.Tensor = tensor.Tensor

-- CKKS contexts, values, envelopes, value files ------------------------------
require("fhelium.values").install(fh)

-- CKKS engine (keys, encoding, encryption, evaluator) ------------------------
require("fhelium.ckks").install(fh)

-- devices, streams, events ---------------------------------------------------
fh.cuda = require "fhelium.cuda"

-- tracing: fh.trace.start(), fh.trace.stop() -> a trace (save, svg)
fh.trace = require "fhelium.trace"

-- pipelines: fh.pipeline(fn, opts), a ring of slots over streams and programs
fh.pipeline = require "fhelium.pipeline"

-- pretty printing (REPL and tostring) ---------------------------------------
fh.pretty = require "fhelium.pretty"

-- fh.partial(fn, ...): bind static arguments (used to capture programs)
fh.partial = require "fhelium.partial"

-- many processes: MPI and NCCL (lua/fhelium/distributed.lua)
fh.distributed = require "fhelium.distributed"

-- build and runtime information
function fh.info() return core.info() end

-- execution layer: lazily loaded so `fh.execution` == require "fhelium.execution"
setmetatable(fh, {
  __index = function(t, k)
    if k == "execution" then
      local ok, ex = pcall(require, "fhelium.execution")
      if ok then rawset(t, k, ex) return ex end
      error(ex, 2)
    end
  end,
})

package.loaded["fhelium"] = fh
return fh
