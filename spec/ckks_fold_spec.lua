-- FHELIUM_CUDA_FOLD=1 (docs/ckks.md, "Sources scaled by the INTT"): the INTT before a key
-- switch writes its conversion sources, and the key switch and the mod-down convert from them.
-- The CPU takes the switch at every size, so this runs the evaluator's folded calls on the CPU:
-- a process per setting (the switch is read when a context's tables are built) computes the
-- key switch's operations (spec/support/switch_words.lua, --save) and the two sets of words must
-- be equal. The CUDA kernels' side: ckks_cuda_spec (intt_sources) and ckks_cuda_switches_spec.
local fh = require "fhelium"
local cli = require "spec.support.cli"

local CHILD = cli.root .. "/spec/support/switch_words.lua"

describe("FHELIUM_CUDA_FOLD", function()
  it("gives the same words as the unfolded key switch on the CPU", function()
    local saved = {}
    for _, fold in ipairs { "0", "1" } do
      local path = os.tmpname()
      local r = cli.sh(("timeout 300 %s %s cpu --save %s"):format(cli.quote(cli.bin), cli.quote(CHILD), cli.quote(path)),
        { env = { FHELIUM_CUDA_FOLD = fold } })
      local what = ("FHELIUM_CUDA_FOLD=%s: exit %s\nstdout:\n%s\nstderr:\n%s"):format(fold, tostring(r.code), r.stdout,
        r.stderr)
      assert(r.code == 0, what)
      assert(r.stdout:find("switch words: saved\n$"), what)
      saved[fold] = fh.load(path)
      os.remove(path)
    end
    local n = 0
    for slots, ops in pairs(saved["0"]) do
      for name, v in pairs(ops) do
        local w = saved["1"][slots][name]
        assert.is_true(fh.equal(v.data, w.data), ("%s %s"):format(slots, name))
        n = n + 1
      end
    end
    assert.are.equal(2 * 10, n) -- 7 operations and 3 rotations, at two presets
  end)
end)
