-- CKKS on CUDA: every CKKS kernel and every engine operation on cuda:0 gives
-- the CPU's results bit for bit (docs/ckks.md, "CKKS on CUDA"), inside and
-- outside CUDA graph programs. gpu-tagged: without a GPU these are skipped;
-- the CPU twins of the rules they check (strided groups, the test entries,
-- host programs of the same functions) run in ckks_arith_spec.lua,
-- ckks_engine_spec.lua and program_spec.lua. Seeds are printed
-- (FHELIUM_SEED replays one); FHELIUM_SLOW=1 adds the larger presets.
local fh = require "fhelium"
local ex = require "fhelium.execution"
local H = require "spec.helpers"
local C = fh.core._ckks
local gpu_it = H.gpu_it
local slow = os.getenv("FHELIUM_SLOW") == "1"

local u64 = H.u64

local residues = H.residues

local function same(cpu, gpu, what)
  local g = gpu:cpu()
  assert.are.same(cpu.shape, g.shape, what .. ": shapes")
  assert.are.equal(cpu.dtype, g.dtype, what .. ": dtypes")
  if not fh.equal(cpu, g) then
    local d = (cpu.dtype == "uint64" or cpu.dtype == "int64") and "(integers)" or fh.max_abs_diff(cpu, g)
    error(("%s: the CUDA result differs from the CPU's (max |diff| %s)"):format(what, tostring(d)), 2)
  end
end

-- one prime of every size a preset uses: two scale primes, the base prime,
-- the P primes (at most two)
local function preset_primes(name)
  local ctx = fh.CkksEngine(fh.Preset[name]).context
  local q, p = ctx.q_primes, ctx.p_primes
  local qs = { q[1], q[2], q[#q] }
  local ps = { p[1], p[2] }
  local all = { q[1], q[2], q[#q] }
  for _, x in ipairs(ps) do all[#all + 1] = x end
  return ctx.log_n, all, #qs
end

local kernel_presets = { "slots8192_scale30_levels9_int64", "slots8192_scale40_levels7_int64",
  "slots8192_scale50_levels5_int64", "slots16384_scale30_levels21_int64", "slots16384_scale40_levels16_int64",
  "slots16384_scale50_levels12_int64", "slots32768_scale30_levels45_int64", "slots32768_scale40_levels34_int64",
  "slots32768_scale50_levels27_int64", "slots65536_scale30_levels95_int64", "slots65536_scale40_levels72_int64",
  "slots65536_scale50_levels58_int64" }

describe("CKKS kernels on CUDA", function()
  local seed = H.seed("ckks cuda kernels")

  -- small rings too: the one-kernel NTT and FFT paths (N <= 2048 words, 2048 complex values)
  local function small_case(log_n)
    local qs = C.find_primes(40, log_n, 2):tolist()
    local ps = C.find_primes(60, log_n, 2):tolist()
    return log_n, { qs[1], qs[2], ps[1], ps[2] }, 3
  end

  -- under compute-sanitizer (scripts/gpu-check) every code path, fewer sizes: the
  -- instrumented kernels run far slower
  local sanitized = (os.getenv("FHELIUM_SANITIZER") or "") ~= ""
  local cases = {}
  for _, ln in ipairs(sanitized and { 1, 4, 12 } or { 1, 2, 4, 11, 12 }) do
    cases[#cases + 1] = { "N=2^" .. ln, small_case(ln) }
  end
  for _, name in ipairs(kernel_presets) do
    if not sanitized or name == "slots8192_scale40_levels7_int64" or name == "slots32768_scale40_levels34_int64" then
      cases[#cases + 1] = { name, preset_primes(name) }
    end
  end

  for _, case in ipairs(cases) do
    local label, log_n, primes, nq = case[1], case[2], case[3], case[4]
    gpu_it("gives the CPU's results for every kernel id on " .. label, function()
      local n = 2 ^ log_n
      local tc = C.tables(log_n, u64(primes), nq)
      local tg = C.tables(log_n, u64(primes), nq, { device = "cuda:0" })
      local ids, qs = {}, {}
      for i = 1, #primes do
        ids[i] = i - 1
        qs[i] = primes[i]
      end
      local G = 3
      local x = residues({ G }, qs, n, seed)
      local y = residues({ G }, qs, n, seed + 1000)
      local z = residues({ G }, qs, n, seed + 2000)
      -- strided groups: the rows 2.. of a [G, L + 1, N] batch
      local wide_q = { qs[1] }
      for i = 1, #qs do wide_q[#wide_q + 1] = qs[i] end
      local wide = residues({ G }, wide_q, n, seed + 3000):narrow(2, 2, #qs)
      local function both(fname, ...)
        local args_c, args_g = { ... }, { ... }
        for i, a in ipairs(args_g) do
          if fh.is_tensor(a) then args_g[i] = a:cuda() end
        end
        return C[fname](tc, unpack(args_c)), C[fname](tg, unpack(args_g))
      end
      for _, inp in ipairs { { "contiguous", x }, { "strided", wide } } do
        local fc, fg = both("ntt", inp[2], ids)
        same(fc, fg, "ntt, " .. inp[1] .. " groups")
        local ic, ig = both("intt", inp[2], ids)
        same(ic, ig, "intt, " .. inp[1] .. " groups")
        same(C.intt(tc, fc, ids), C.intt(tg, fg, ids), "intt of the ntt")
      end
      -- the inverse with its outputs made a key switch's conversion sources (fh_ckks_ntt_args.scale):
      -- the active Q rows of levels 0 and 1, and the P rows of a mod-down, contiguous and strided
      for _, level in ipairs { 0, 1 } do
        local qrows = residues({ G }, { unpack(qs, level + 1, nq) }, n, seed + 150 + level)
        local sc, sg = both("intt_sources", qrows, level)
        same(sc, sg, "intt_sources, level " .. level)
        local qwide = residues({ G }, { qs[1], unpack(qs, level + 1, nq) }, n, seed + 160 + level)
        sc, sg = both("intt_sources", qwide:narrow(2, 2, nq - level), level)
        same(sc, sg, "intt_sources, strided groups, level " .. level)
      end
      local prows = residues({ G }, { unpack(qs, nq + 1) }, n, seed + 170)
      local mc, mg = both("intt_sources", prows, 1, "moddown")
      same(mc, mg, "intt_sources of P rows")
      -- element-wise: every operation, per-limb constants
      local ks, cs = {}, {}
      for i = 1, #qs do
        ks[i] = C.sample("uniform", 1, { q = qs[i], seed = seed + 4000 + i }):tolist()[1]
        cs[i] = C.sample("uniform", 1, { q = qs[i], seed = seed + 5000 + i }):tolist()[1]
      end
      local opts = { k = u64(ks), c = u64(cs) }
      for _, op in ipairs { "copy", "add", "sub", "neg", "mont_mul", "mont_mac", "mul_const", "add_const",
        "sub_add_mul", "add_mul_const", "to_mont", "from_mont" } do
        local ec, eg = both("ew", op, ids, x, wide, z, opts)
        same(ec, eg, "ew " .. op)
      end
      local ec, eg = both("ew", "sub_add_mul", ids, x, y, nil, opts)
      same(ec, eg, "ew sub_add_mul without the added operand")
      -- signed int64 rows, broadcast over the limbs and per limb, small and large magnitudes
      local small = C.sample("gaussian", G * n, { seed = seed + 6000 }):view(G, n)
      local big = fh.tensor(C.sample("uniform", G * n, { q = 2305843009213693951ULL, seed = seed + 6001 }),
        { dtype = "int64" }):view(G, n)
      big:sub_(1152921504606846976) -- centred: |a| < 2^60
      for _, s in ipairs { { "small", small }, { "large", big } } do
        ec, eg = both("ew", "signed", ids, s[2])
        same(ec, eg, "ew signed, broadcast, " .. s[1])
      end
      -- tensor product, base conversion, key-switching inner product
      local a2, b2 = residues({ 2, G }, qs, n, seed + 7000), residues({ 2, G }, qs, n, seed + 8000)
      local tcpu, tgpu = both("tensor", a2, b2, ids)
      same(tcpu, tgpu, "tensor product")
      local q_ids, p_ids = {}, {}
      for i = 1, nq do q_ids[i] = i - 1 end
      for i = nq + 1, #qs do p_ids[#p_ids + 1] = i - 1 end
      local xq = residues({ G }, { unpack(qs, 1, nq) }, n, seed + 9000)
      local xp = residues({ G }, { unpack(qs, nq + 1) }, n, seed + 9100)
      for _, center in ipairs { false, true } do
        local bc, bg = both("bconv", xq, q_ids, p_ids, center)
        same(bc, bg, "bconv Q -> P, center " .. tostring(center))
        bc, bg = both("bconv", xp, p_ids, q_ids, center)
        same(bc, bg, "bconv P -> Q, center " .. tostring(center))
        bc, bg = both("bconv", x:narrow(2, 1, 1), { 0 }, { 1, 2 }, center)
        same(bc, bg, "bconv from one prime, center " .. tostring(center))
      end
      for _, D in ipairs { 1, 3, 5 } do
        local digits = residues({ G, D }, qs, n, seed + 10000 + D)
        local key = residues({ D, 2 }, qs, n, seed + 11000 + D)
        local rows = {}
        for i = 1, #qs do rows[i] = i - 1 end
        local kc, kg = both("ks_inner", digits, key, ids, rows)
        same(kc, kg, ("ks_inner with %d digits"):format(D))
        -- the digits read through a rotation's automorphism (rotate_many's steps on CUDA)
        for _, gal in ipairs { 5, 2 * n - 1 } do
          if gal < 2 * n then
            kc, kg = both("ks_inner", digits, key, ids, rows, gal)
            same(kc, kg, ("ks_inner with %d digits, galois %d"):format(D, gal))
          end
        end
        -- several steps in one launch (rotate_many's hoisted steps)
        local gals = { 5 % (2 * n), 1, 2 * n - 1 }
        kc, kg = both("ks_inner", digits, key, ids, rows, gals)
        same(kc, kg, ("ks_inner with %d digits, %d steps"):format(D, #gals))
      end
      -- the mod-up of every digit at every level (one P prime per digit's worth of Q primes)
      for level = 0, nq - 1 do
        local act = {}
        for i = level + 1, nq do act[#act + 1] = qs[i] end
        local mu_c, mu_g = both("modup", residues({ G }, act, n, seed + 13000 + level), level)
        same(mu_c, mu_g, ("modup at level %d"):format(level))
      end
      -- automorphisms in both domains
      local m2 = 2 * n
      for _, g in ipairs { 3 % m2, 5 % m2, (5 ^ 7) % m2, m2 - 1 } do
        for _, ntt in ipairs { false, true } do
          local ac, ag = both("automorph", wide, ids, g, ntt)
          same(ac, ag, ("automorph %d, %s domain"):format(g, ntt and "ntt" or "coefficient"))
        end
      end
      -- ternary and Gaussian rows from a keystream run: the host samplers' rows, and the stream
      -- continues where theirs does (ChaCha20 computed on the device)
      for _, skip in ipairs { 0, 5, 509 } do
        local rc, nc = C.sample_run(tc, 2, 3, { seed = seed + skip, skip = skip, sequential = true })
        local rg, ng = C.sample_run(tg, 2, 3, { seed = seed + skip, skip = skip })
        same(rc, rg, ("sample run after %d words"):format(skip))
        assert.is_true(fh.equal(nc, ng), "the stream's next word")
      end
      -- encode and decode (the same special FFT, bit for bit)
      local slots = n / 2
      local msg = fh.rand({ G, slots }, { dtype = "float64", generator = fh.Generator(seed) }) - 0.5
      local cmsg = fh.tensor(msg, { dtype = "complex128" }) * fh.tensor({ { 0.5, -0.25 } }, { dtype = "complex128" })
      local part = msg:narrow(2, 1, math.max(1, math.floor(slots / 3)))
      for _, m in ipairs { { "real", msg }, { "complex", cmsg }, { "partial", part } } do
        for nl = 1, nq do
          local pc, pg = both("encode", m[2], 2 ^ 30, nl)
          same(pc, pg, ("encode %s, %d limbs"):format(m[1], nl))
          local dc, dg = both("decode", pc, 2 ^ 30, true)
          same(dc, dg, ("decode of the encoding, %d limbs"):format(nl))
          local qc, qg = both("encode", m[2], 2 ^ 30, nl, true)
          same(qc, qg, ("encode %s, %d limbs and the P primes"):format(m[1], nl))
        end
      end
      -- decode of uniform residues: values far beyond 128 bits take the multi-word path
      local rq = residues({ G }, { unpack(qs, 1, nq) }, n, seed + 12000)
      for _, cx in ipairs { true, false } do
        local dc, dg = both("decode", rq, 2 ^ 40, cx)
        same(dc, dg, "decode of uniform residues, complex " .. tostring(cx))
      end
    end)
  end
end)

-- ---- the engine on cuda:0 against the CPU engine -----------------------------------------------
-- a small ring too (N = 2^10: the one-kernel NTT and key-switch paths), then presets
local small_ring = { log_n = 10, q_bits = { 40, 40, 40, 60 }, p_bits = { 60, 60 }, scale = 2 ^ 40,
  allow_insecure = true }
local engine_presets = { "small ring", "slots8192_scale40_levels7_int64", "slots16384_scale40_levels16_int64" }
if slow then
  for _, p in ipairs { "slots32768_scale40_levels34_int64", "slots65536_scale40_levels72_int64" } do
    engine_presets[#engine_presets + 1] = p
  end
end

local function same_value(c, g, what)
  assert.are.equal("cuda:0", g.device, what .. ": device")
  assert.are.equal(c.level, g.level, what .. ": level")
  same(c.data, g.data, what)
end

describe("CkksEngine on cuda:0", function()
  local seed = H.seed("ckks cuda engine")
  for _, name in ipairs(engine_presets) do
    gpu_it("gives the CPU engine's keys, ciphertexts and results with the same seed on " .. name, function()
      local what = name == "small ring" and small_ring or fh.Preset[name]
      local ec = fh.CkksEngine(what, { seed = seed })
      local eg = fh.CkksEngine(what, { device = "cuda:0", seed = seed })
      local S = ec.context.num_slots
      local gen = fh.Generator(seed)
      local m1 = fh.rand({ S }, { dtype = "float64", generator = gen }) - 0.5
      local m2 = fh.rand({ S }, { dtype = "float64", generator = gen }) - 0.5
      local K = {}
      for _, e in ipairs { ec, eg } do
        local k = {}
        k.sk = e:create_secret_key()
        k.pk = e:create_public_key(k.sk)
        k.rlk = e:create_relinearization_key(k.sk)
        k.rk1 = e:create_rotation_key(k.sk, 1)
        k.rk3 = e:create_rotation_key(k.sk, -3)
        k.ck = e:create_conjugation_key(k.sk)
        K[#K + 1] = k
      end
      for _, key in ipairs { "sk", "pk", "rlk", "rk1", "rk3", "ck" } do same_value(K[1][key], K[2][key], key) end
      local function run(e, k)
        local r = {}
        r.pt1 = e:encode(m1)
        r.a = e:coefficient_domain_to_ntt_domain(e:encrypt(r.pt1, k.pk))
        r.b = e:coefficient_domain_to_ntt_domain(e:encrypt_message(m2, k.pk))
        r.enc = e:encrypt_message(m1, k.pk)
        r.add = e:add(r.a, r.b)
        r.sub = e:sub(r.a, r.b)
        r.neg = e:negate(r.a)
        r.addp = e:add_plaintext(r.enc, e:encode(m2))
        r.mul = e:multiply(r.a, r.b)
        r.relin = e:relinearize(r.mul, k.rlk)
        r.rescale = e:rescale_to_next_level(r.relin)
        r.rescale_coef = e:rescale_to_next_level(e:ntt_domain_to_coefficient_domain(r.relin))
        r.rescale3 = e:rescale_to_next_level(e:multiply(e:stack_batch({ r.a, r.b, r.a }), e:stack_batch({ r.b, r.b, r.a })))
        r.ppt = e:prepare_plaintext_for_multiplication(e:encode(m2))
        r.mulp = e:multiply_plaintext(r.a, r.ppt)
        r.rot1 = e:rotate_by_step(r.a, 1, k.rk1)
        r.rot3 = e:rotate_with_key(r.rescale, k.rk3)
        r.conj = e:conjugate(r.a, k.ck)
        r.coeff = e:ntt_domain_to_coefficient_domain(r.a)
        r.rotc = e:rotate_by_step(r.coeff, 1, k.rk1)
        r.ntt = e:coefficient_domain_to_ntt_domain(r.coeff)
        r.batch = e:stack_batch({ r.a, r.b, r.add })
        r.sum = e:sum_ciphertext_batch(r.batch)
        r.rotb = e:rotate_by_step(r.batch, 1, k.rk1)
        -- relinearize and rescale in one mod-down (the fused kernels above N = 2^11)
        r.relres = e:relinearize(r.mul, k.rlk, { rescale = true })
        r.relres3 = e:relinearize(e:multiply(r.batch, r.batch), k.rlk, { rescale = true })
        r.relres3_seq = e:rescale_to_next_level(e:relinearize(e:multiply(r.batch, r.batch), k.rlk))
        r.dec = e:decrypt(r.rot3, k.sk)
        r.msg = e:decrypt_message(r.rot3, k.sk, { is_real = true })
        r.msgc = e:decrypt_message(r.conj, k.sk)
        return r
      end
      local rc, rg = run(ec, K[1]), run(eg, K[2])
      for _, key in ipairs { "pt1", "enc", "a", "b", "add", "sub", "neg", "addp", "mul", "relin", "rescale", "rescale_coef", "rescale3", "ppt", "mulp",
        "rot1", "rot3", "conj", "coeff", "rotc", "ntt", "batch", "sum", "rotb", "dec", "relres", "relres3" } do
        same_value(rc[key], rg[key], key)
      end
      -- the fused relinearize-rescale is the two operations' words on the GPU too
      assert.is_true(fh.equal(rg.relres.data, rg.rescale.data), "relinearize with rescale = true")
      assert.is_true(fh.equal(rg.relres3.data, rg.relres3_seq.data), "relinearize with rescale = true (batch)")
      -- decrypted messages come back on the engine's device, equal to the CPU's
      assert.are.equal("cuda:0", rg.msg.device)
      same(rc.msg, rg.msg, "decrypt_message")
      same(rc.msgc, rg.msgc, "decrypt_message (complex)")
      -- and right: (m1 * m2) rolled by -3
      local want = (m1 * m2):tolist()
      local got = rg.msg:cpu():tolist()
      local worst = 0
      for j = 1, S do worst = math.max(worst, math.abs(got[j] - want[(j + 3 - 1) % S + 1])) end
      assert.is_true(worst < 1e-5, "decryption error " .. worst)
    end)
  end
end)

describe("CUDA graph programs of CKKS operations", function()
  local seed = H.seed("ckks cuda capture")
  local name = "slots8192_scale40_levels7_int64"

  gpu_it("replay multiply-relinearize-rescale-rotate with changing inputs, bit for bit as eager", function()
    local e = fh.CkksEngine(fh.Preset[name], { device = "cuda:0", seed = seed })
    local sk = e:create_secret_key()
    local pk = e:create_public_key(sk)
    local rlk = e:create_relinearization_key(sk)
    local rk = e:create_rotation_key(sk, 2)
    local S = e.context.num_slots
    local gen = fh.Generator(seed)
    local function msg() return fh.rand({ S }, { dtype = "float64", generator = gen }) - 0.5 end
    local function enc(m) return e:coefficient_domain_to_ntt_domain(e:encrypt_message(m, pk)) end
    local function fn(x, y)
      local z = e:rescale_to_next_level(e:relinearize(e:multiply(x, y), rlk))
      return e:rotate_with_key(z, rk)
    end
    local prog = ex.CudaGraphProgram.capture(fn, { example_inputs = { enc(msg()), enc(msg()) } })
    assert.is_true(prog.stats.node_count > 0)
    -- the same with the rescale fused into the relinearization's mod-down: the same words
    local fused = ex.CudaGraphProgram.capture(function(x, y)
      return e:rotate_with_key(e:relinearize(e:multiply(x, y), rlk, { rescale = true }), rk)
    end, { example_inputs = { enc(msg()), enc(msg()) } })
    -- the program owns what its graph reads: the keys may go
    rlk, rk = nil, nil
    collectgarbage("collect")
    collectgarbage("collect")
    for round = 1, 3 do
      local m1, m2 = msg(), msg()
      local x, y = enc(m1), enc(m2)
      local out = prog:replay({ x, y }, { copy_output = true })
      assert.is_true(fh.equal(fused:replay({ x, y }, { copy_output = true }).data, out.data),
        ("round %d: the fused program's words"):format(round))
      local dec = e:decrypt_message(out, sk, { is_real = true }):cpu():tolist()
      local want = (m1 * m2):tolist()
      local worst = 0
      for j = 1, S do worst = math.max(worst, math.abs(dec[j] - want[(j - 2 - 1) % S + 1])) end
      assert.is_true(worst < 1e-5, ("round %d: decryption error %g"):format(round, worst))
    end
    prog:close()
    fused:close()
    H.expect_error("ExecutionError", "closed", prog.replay, prog, { enc(msg()), enc(msg()) })
  end)

  gpu_it("replays give the eager results bit for bit", function()
    local e = fh.CkksEngine(fh.Preset[name], { device = "cuda:0", seed = seed + 1 })
    local sk = e:create_secret_key()
    local pk = e:create_public_key(sk)
    local rlk = e:create_relinearization_key(sk)
    local rk = e:create_rotation_key(sk, -1)
    local ck = e:create_conjugation_key(sk)
    local S = e.context.num_slots
    local gen = fh.Generator(seed + 1)
    local function msg() return fh.rand({ S }, { dtype = "float64", generator = gen }) - 0.5 end
    local pt = e:prepare_plaintext_for_multiplication(e:encode(msg()))
    local function enc(m) return e:coefficient_domain_to_ntt_domain(e:encrypt_message(m, pk)) end
    local function fn(x, y)
      local z = e:rescale_to_next_level(e:relinearize(e:multiply(x, y), rlk))
      local w = e:rescale_to_next_level(e:multiply_plaintext(x, pt))
      return ex.tuple(e:rotate_with_key(z, rk), e:add(e:conjugate(w, ck), z), e:sub(x, y))
    end
    local prog = ex.CudaGraphProgram.capture(fn, { example_inputs = { enc(msg()), enc(msg()) } })
    for round = 1, 3 do
      local x, y = enc(msg()), enc(msg())
      local out = prog:replay({ x, y }, { copy_output = true, synchronize = true })
      local ref = fn(x, y)
      for i = 1, 3 do same(ref[i].data, out[i].data, ("round %d, output %d"):format(round, i)) end
    end
    prog:close()
  end)

  gpu_it("refuse key creation and encryption inside a capture", function()
    local e = fh.CkksEngine(fh.Preset[name], { device = "cuda:0", seed = seed + 2 })
    local sk = e:create_secret_key()
    local pk = e:create_public_key(sk)
    local ct = e:encrypt_message(1.0, pk)
    local pt = e:encode(2.0)
    local err = H.expect_error("CudaGraphCaptureError", "randomness", ex.CudaGraphProgram.capture,
      function(x) e:encrypt(pt, pk); return x end, { example_inputs = { ct }, warmup = 0 })
    assert.are.equal("capture", err.stage)
    err = H.expect_error("CudaGraphCaptureError", "randomness", ex.CudaGraphProgram.capture,
      function(x) e:create_rotation_key(sk, 1); return x end, { example_inputs = { ct }, warmup = 0 })
    assert.are.equal("capture", err.stage)
  end)
end)

describe("CkksEngine on cuda:0 refuses", function()
  local name = "slots8192_scale40_levels7_int64"
  local function launches() return fh.core.info().launches end

  gpu_it("operands of another device, naming the argument and both devices, before any launch", function()
    local eg = fh.CkksEngine(fh.Preset[name], { device = "cuda:0", seed = 1 })
    local ec = fh.CkksEngine(fh.Preset[name], { seed = 1 })
    local skg, skc = eg:create_secret_key(), ec:create_secret_key()
    local pkg, pkc = eg:create_public_key(skg), ec:create_public_key(skc)
    local rlkc = ec:create_relinearization_key(skc)
    local ctg = eg:coefficient_domain_to_ntt_domain(eg:encrypt_message(1.0, pkg))
    local ctc = ec:coefficient_domain_to_ntt_domain(ec:encrypt_message(1.0, pkc))
    local prod = eg:multiply(ctg, ctg)
    local before = launches()
    H.expect_error("ValueError", { "b is on cpu but the engine runs on cuda:0" }, eg.add, eg, ctg, ctc)
    H.expect_error("ValueError", { "a is on cpu but the engine runs on cuda:0" }, eg.multiply, eg, ctc, ctg)
    H.expect_error("ValueError", { "rlk is on cpu but the engine runs on cuda:0" }, eg.relinearize, eg, prod, rlkc)
    assert.are.equal(before, launches(), "nothing was launched")
    local pt = eg:encode(1.0)
    before = launches()
    H.expect_error("ValueError", { "sk is on cpu but the engine runs on cuda:0" }, eg.decrypt, eg, ctg, skc)
    H.expect_error("ValueError", { "pk is on cpu but the engine runs on cuda:0" }, eg.encrypt, eg, pt, pkc)
    assert.are.equal(before, launches(), "nothing was launched")
  end)

  gpu_it("nothing of that in buffers: a CPU ciphertext fills a CUDA buffer the CUDA engine computes on", function()
    local eg = fh.CkksEngine(fh.Preset[name], { device = "cuda:0", seed = 3 })
    local ec = fh.CkksEngine(fh.Preset[name], { seed = 3 })
    local skg, skc = eg:create_secret_key(), ec:create_secret_key()
    local pkc = ec:create_public_key(skc)
    local ctc = ec:encrypt_message({ 1.5, -2.25, 3 }, pkc)
    local buf = ex.ReusableValueBuffer.like(ctc, { device = "cuda:0" })
    buf:copy_from(ctc):synchronize()
    assert.are.equal("cuda:0", buf.value.device)
    -- the same seed: the same secret key on both engines
    same(skc.data, skg.data, "secret keys")
    local sum = eg:add(buf.value, buf.value)
    local got = eg:decrypt_message(sum, skg, { is_real = true }):cpu():narrow(1, 1, 3):tolist()
    for i, want in ipairs { 3, -4.5, 6 } do assert.is_true(math.abs(got[i] - want) < 1e-5, got[i]) end
    buf:close()
  end)

  gpu_it("a rotation key for another step and a context mismatch, before any launch", function()
    local eg = fh.CkksEngine(fh.Preset[name], { device = "cuda:0", seed = 2 })
    local other = fh.CkksEngine(fh.Preset.slots8192_scale50_levels5_int64, { device = "cuda:0", seed = 2 })
    local sk = eg:create_secret_key()
    local pk = eg:create_public_key(sk)
    local rk2 = eg:create_rotation_key(sk, 2)
    local osk = other:create_secret_key()
    local ct = eg:encrypt_message(1.0, pk)
    local oct = other:encrypt_message(1.0, other:create_public_key(osk))
    local before = launches()
    H.expect_error("StateError", "step", eg.rotate_by_step, eg, ct, 3, rk2)
    H.expect_error("StateError", "context_id", eg.add, eg, ct, oct)
    H.expect_error("StateError", "context_id", eg.decrypt, eg, ct, osk)
    assert.are.equal(before, launches(), "nothing was launched")
  end)
end)
