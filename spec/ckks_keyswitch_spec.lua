-- Key-switching error statistics (rotation, conjugation, relinearization).
-- The error of one key switch is measured against the decryption of its own
-- input, so the fresh encryption noise cancels:
--   rotate / conjugate: dec(op(ct)) - map(dec(ct))
--   relinearize:        dec(relinearize(m3)) - dec(m3), in scale-2^40 units
-- Over fresh encryptions of different messages this error must be zero-mean
-- in every slot. An offset c in every coefficient of a polynomial that the key
-- switch multiplies by the key's error or by s (uncentered digits, floor-like
-- rounding) is an input-independent error c * (1 + X + ... + X^(N-1)) * e,
-- about c * 2N/pi * |e(zeta)| / scale in slot 1 and a fifth of that in slot 2.
local fh = require "fhelium"
local H = require "spec.helpers"

local function cplx(t)
  local l, o = t:tolist(), {}
  for i = 1, #l do o[i] = { l[i][1], l[i][2] } end
  return o
end

-- K fresh encryptions of random messages; op(ct) returns (out, ref, factor):
-- the per-sample error is (out - ref) * factor, slot by slot
local function stats(e, sk, pk, g, K, op)
  local S = e.context.num_slots
  local sr, si, ss, mx = {}, {}, 0, 0
  for j = 1, S do
    sr[j], si[j] = 0, 0
  end
  for _ = 1, K do
    local m = fh.randn({ S }, { generator = g, dtype = "float64" })
    local ct = e:coefficient_domain_to_ntt_domain(e:encrypt_message(m, pk))
    local out, ref, f = op(ct)
    for j = 1, S do
      local dr, di = (out[j][1] - ref[j][1]) * f, (out[j][2] - ref[j][2]) * f
      sr[j], si[j] = sr[j] + dr, si[j] + di
      ss = ss + dr * dr + di * di
      mx = math.max(mx, math.sqrt(dr * dr + di * di))
    end
  end
  local rms, worst, at = math.sqrt(ss / (K * S)), 0, 0
  for j = 1, S do
    local a = math.sqrt(sr[j] ^ 2 + si[j] ^ 2) / K
    if a > worst then worst, at = a, j end
  end
  return { rms = rms, max = mx, worst_mean = worst, worst_slot = at }
end

local function check(name, s, K, max_bound)
  -- errors exist (the comparison is not of a value with itself)
  assert(s.rms > 1e-11, ("%s: rms error %g: nothing measured"):format(name, s.rms))
  -- no slot's mean error stands out of the spread of a mean of K samples:
  -- for zero-mean errors the worst of the slots is 4-7 rms / sqrt(K) (slots
  -- differ in variance with |s(zeta_j)| and |e(zeta_j)|; 12 is exceeded with
  -- probability ~1e-6), the bias this guards against was 50-200 times that
  local bound = 12 * s.rms / math.sqrt(K)
  assert(s.worst_mean < bound,
    ("%s: mean error %g in slot %d over %d encryptions exceeds %g (12 rms / sqrt(K), rms %g): an input-independent bias")
    :format(name, s.worst_mean, s.worst_slot, K, bound, s.rms))
  assert(s.max < max_bound, ("%s: max error %g exceeds %g"):format(name, s.max, max_bound))
end

local function suite(label, engine_of, K, max_bound)
  describe("ckks key switching is unbiased: " .. label, function()
    local seed = H.seed("ckks keyswitch " .. label)
    local e = engine_of(seed)
    local g = fh.Generator(seed)
    local S = e.context.num_slots
    local sk = e:create_secret_key()
    local pk = e:create_public_key(sk)
    local rlk = e:create_relinearization_key(sk)

    for _, r in ipairs { 1, -1 } do
      it(("rotates by %d with zero-mean errors below %g"):format(r, max_bound), function()
        local rk = e:create_rotation_key(sk, r)
        check("rotate " .. r, stats(e, sk, pk, g, K, function(ct)
          local d = cplx(e:decrypt_message(ct, sk))
          local ref = {}
          for j = 1, S do ref[j] = d[((j - 1 - r) % S) + 1] end -- torch.roll(m, r)
          return cplx(e:decrypt_message(e:rotate_with_key(ct, rk), sk)), ref, 1
        end), K, max_bound)
      end)
    end

    it(("conjugates with zero-mean errors below %g"):format(max_bound), function()
      local ck = e:create_conjugation_key(sk)
      check("conjugate", stats(e, sk, pk, g, K, function(ct)
        local d = cplx(e:decrypt_message(ct, sk))
        local ref = {}
        for j = 1, S do ref[j] = { d[j][1], -d[j][2] } end
        return cplx(e:decrypt_message(e:conjugate(ct, ck), sk)), ref, 1
      end), K, max_bound)
    end)

    it(("relinearizes with zero-mean errors below %g (at scale 2^40)"):format(max_bound), function()
      check("relinearize", stats(e, sk, pk, g, K, function(ct)
        -- times an encryption of zero: m3's slots stay small, so the doubles
        -- keep the key-switching error of a scale-2^80 ciphertext exactly
        local z = e:coefficient_domain_to_ntt_domain(e:encrypt_message(0, pk))
        local m3 = e:multiply(ct, z)
        assert.equal(2 ^ 80, m3.scale)
        return cplx(e:decrypt_message(e:relinearize(m3, rlk), sk)), cplx(e:decrypt_message(m3, sk)), 2 ^ 40
      end), K, max_bound)
    end)
  end)
end

-- one P prime (exact mod-up and mod-down): the 60-bit base prime is a digit of its own
suite("8192-slot preset", function(seed)
  return fh.CkksEngine(fh.Preset.slots8192_scale40_levels7_int64, { seed = seed })
end, 8, 2e-7)

-- two P primes: approximate (fast) base conversions in the mod-up and the mod-down
suite("N=2^14, two P primes", function(seed)
  return fh.CkksEngine({ log_n = 14, q_bits = { 40, 40, 40, 60 }, p_bits = { 60, 60 }, scale = 2 ^ 40,
    allow_insecure = true }, { seed = seed })
end, 8, 1e-7)
