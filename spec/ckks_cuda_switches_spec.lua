-- The CUDA kernel switches (docs/ckks.md, "Kernel switches") choose between kernel variants for
-- A/B benchmarks and must never change a word: for each setting a process of its own (a switch
-- is read once per process) runs relinearize (plain, with the rescale, fused with multiply), a
-- rotation, rotate_many and a linear transform on cuda:0 and on the CPU with one seed and
-- compares them word for word (spec/support/switch_words.lua, at 8192 and 16384 slots). gpu-tagged; the CPU side of
-- the same operations is what the other CKKS specs check.
local H = require "spec.helpers"
local cli = require "spec.support.cli"

local CHILD = cli.root .. "/spec/support/switch_words.lua"

local settings = {
  { "FHELIUM_CUDA_KS", "fused" }, { "FHELIUM_CUDA_KS", "split" }, { "FHELIUM_CUDA_KS1T", "1" },
  { "FHELIUM_CUDA_KS1T", "4" }, { "FHELIUM_CUDA_KS2", "3" }, { "FHELIUM_CUDA_KS2", "w" },
  { "FHELIUM_CUDA_RAW", "0" }, { "FHELIUM_CUDA_NTTB", "3" }, { "FHELIUM_CUDA_FOLD", "1" },
}

describe("CUDA kernel switches", function()
  for _, s in ipairs(settings) do
    H.gpu_it(("%s=%s gives the CPU's words"):format(s[1], s[2]), function()
      local r = cli.sh(("timeout 300 %s %s cuda:0"):format(cli.quote(cli.bin), cli.quote(CHILD)),
        { env = { [s[1]] = s[2] } })
      local what = ("%s=%s: exit %s\nstdout:\n%s\nstderr:\n%s"):format(s[1], s[2], tostring(r.code), r.stdout,
        r.stderr)
      assert(r.code == 0, what)
      assert(r.stdout:find("switch words: ok\n$"), what)
    end)
  end
end)
