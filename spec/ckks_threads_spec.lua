-- The CPU kernels run the rows of a launch on fh.num_threads() threads
-- (FHELIUM_NUM_THREADS): results are the same words for every thread count.
local fh = require "fhelium"
local H = require "spec.helpers"

describe("host threads of the CPU kernels", function()
  local saved
  before_each(function() saved = fh.num_threads() end)
  after_each(function() fh.set_num_threads(saved) end)

  it("give the same ciphertexts and messages for 1, 2 and 5 threads", function()
    local seed = H.seed("ckks threads")
    local results = {}
    for _, t in ipairs { 1, 2, 5 } do
      fh.set_num_threads(t)
      assert.are.equal(fh.core.info().openmp and t or 1, fh.num_threads())
      local e = fh.CkksEngine(fh.Preset.slots8192_scale40_levels7_int64, { seed = seed })
      local sk = e:create_secret_key()
      local pk = e:create_public_key(sk)
      local rlk = e:create_relinearization_key(sk)
      e:create_rotation_key(sk, 1)
      e:create_rotation_key(sk, -2)
      local m = fh.rand({ 2, e.context.num_slots }, { dtype = "float64", generator = fh.Generator(seed) })
      local x = e:coefficient_domain_to_ntt_domain(e:encrypt_message(m, pk))
      local p = e:rescale_to_next_level(e:relinearize(e:multiply(x, x), rlk))
      local r = e:rotate_many(p, { 1, -2 })
      results[t] = { p.data, r[1].data, r[2].data, e:decrypt_message(r[2], sk) }
    end
    for _, t in ipairs { 2, 5 } do
      for i = 1, 4 do assert.is_true(fh.equal(results[1][i], results[t][i]), ("result %d with %d threads"):format(i, t)) end
    end
  end)

  it("refuse a count outside [1, 4096]", function()
    H.expect_error("ValueError", "^fh%.set_num_threads: n must be an integer in %[1, 4096%], got 0", fh.set_num_threads, 0)
    H.expect_error("ValueError", "got 5000", fh.set_num_threads, 5000)
    H.expect_error("ValueError", "must be an integer", fh.set_num_threads, 1.5)
  end)

  it("start from FHELIUM_NUM_THREADS", function()
    local cli = require "spec.support.cli"
    local r = cli.run({ "-e", "io.write(require('fhelium').num_threads())" }, { env = { FHELIUM_NUM_THREADS = "3" } })
    assert.are.equal(0, r.code, r.stderr)
    assert.are.equal(fh.core.info().openmp and "3" or "1", r.stdout)
  end)
end)
