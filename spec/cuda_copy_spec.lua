-- Copies between CPU pageable, CPU pinned and CUDA memory (gpu specs): every
-- pair, any strides, blocking and non_blocking, the staged pageable pipeline,
-- and the stream option.
local fh = require "fhelium"
local H = require "spec.helpers"
local U = require "spec.support.cuda_util"
local gpu_it = H.gpu_it

local kinds = { "pageable", "pinned", "cuda" }

-- A zero tensor of `shape` in memory of `kind`; strided: a transposed view.
local function make(kind, dtype, shape, strided)
  local o = { dtype = dtype }
  if kind == "pinned" then o.pin_memory = true elseif kind == "cuda" then o.device = "cuda" end
  if not strided then return fh.zeros(shape, o) end
  local rev = { shape[#shape] }
  for i = 2, #shape - 1 do rev[i] = shape[i] end
  rev[#shape] = shape[1]
  local t = fh.zeros(rev, o):transpose(1, #shape)
  assert(not t:is_contiguous())
  return t
end

describe("copies between pageable, pinned and CUDA memory", function()
  gpu_it("copy every pair, contiguous or strided on either side, blocking and non_blocking", function()
    local r = U.rng(H.seed("copy pairs"))
    for _, dt in ipairs { "float32", "uint64", "complex128", "uint8", "bool" } do
      local ref = U.random(dt, { 4, 5, 6 }, r)
      for _, sk in ipairs(kinds) do
        for _, dk in ipairs(kinds) do
          for _, sstr in ipairs { false, true } do
            for _, dstr in ipairs { false, true } do
              for _, nb in ipairs { false, true } do
                local what = ("%s %s%s -> %s%s%s"):format(dt, sk, sstr and " (strided)" or "", dk,
                  dstr and " (strided)" or "", nb and ", non_blocking" or "")
                local src = make(sk, dt, { 4, 5, 6 }, sstr)
                src:copy_(ref)
                local dst = make(dk, dt, { 4, 5, 6 }, dstr)
                assert.equal(dst, dst:copy_(src, { non_blocking = nb }))
                if nb then fh.cuda.synchronize() end
                U.assert_same(ref, dst, what)
              end
            end
          end
        end
      end
    end
  end)

  gpu_it("moves tensors with to, cuda, cpu, pin_memory and fh.tensor", function()
    local h = fh.arange(12, { dtype = "int64" }):view({ 3, 4 })
    local g = h:cuda()
    assert.equal("cuda:0", g.device)
    U.assert_same(h, g)
    assert.equal(g, g:cuda())
    assert.equal(g, g:to("cuda:0"))
    assert.equal(h, h:cpu())
    local c = g:cpu()
    assert.equal("cpu", c.device)
    assert.is_false(c:is_pinned())
    U.assert_same(h, c)
    local nb = h:to("cuda", { non_blocking = true })
    fh.cuda.synchronize()
    U.assert_same(h, nb)
    local t = fh.tensor({ { 1, 2 }, { 3, 4 } }, { device = "cuda", dtype = "float64" })
    assert.equal("cuda:0", t.device)
    assert.same({ { 1, 2 }, { 3, 4 } }, t:tolist())
    local p = fh.tensor(g, { pin_memory = true })
    assert.is_true(p:is_pinned())
    U.assert_same(h, p)
    local e = fh.zeros({ 0, 3 }, { device = "cuda" })
    assert.same({}, e:tolist())
    assert.same({ 0, 3 }, e:cpu().shape)
    assert.equal(0, fh.sum(e):item())
  end)

  gpu_it("stages large pageable copies through pinned chunks, both directions", function()
    local g = fh.Generator(H.seed("staged copies"))
    local n = 3 * 2 ^ 21 + 5 -- float64: 48 MiB + 40 bytes, 7 chunks
    local h = fh.rand({ n }, { dtype = "float64", generator = g })
    local d = h:to("cuda") -- staged host to device
    local back = d:to("cpu") -- staged device to host
    U.assert_same(h, back, "round trip")
    local d2 = h:to("cuda", { non_blocking = true })
    assert.is_true(fh.equal(d, d2)) -- compared on the device
    local p0 = fh.cuda.pinned_memory_stats()
    local d3 = h:to("cuda")
    local p1 = fh.cuda.pinned_memory_stats()
    assert.equal(p0.cuda_allocs, p1.cuda_allocs, "staging buffers come from the pinned cache")
    assert.is_true(fh.equal(d, d3))
    -- strided host source and destination around the pipeline
    local m = h:narrow(1, 1, 2 ^ 21 * 3):view({ 3 * 1024, 2048 }):transpose(1, 2)
    local dm = m:cuda()
    U.assert_same(m, dm, "strided host source")
    local hm = fh.zeros({ 3 * 1024, 2048 }, { dtype = "float64" }):transpose(1, 2)
    hm:copy_(dm)
    U.assert_same(m, hm, "strided host destination")
  end)

  gpu_it("stages pageable host-to-device copies through one fixed pinned ring: many in flight, each its own bytes", function()
    local s = fh.cuda.Stream {}
    local n, copies = 8192, 1500 -- float32: 32 KiB each, 47 MiB in all: the 24 MiB ring wraps
    local d = fh.zeros({ copies, n }, { device = "cuda" })
    d:select(1, 1):copy_(fh.zeros({ n }), { stream = s, non_blocking = true }) -- the ring exists from here on
    s:synchronize()
    local p0 = fh.cuda.pinned_memory_stats()
    fh.cuda._spin(50, s) -- the DMAs queue behind the spin: the ring fills and later copies wait for free bytes
    for i = 1, copies do
      local h = fh.full({ n }, i) -- a fresh pageable source, dropped at once
      d:select(1, i):copy_(h, { stream = s, non_blocking = true })
    end
    local p1 = fh.cuda.pinned_memory_stats()
    s:synchronize()
    assert.equal(p0.reserved, p1.reserved, "the pinned pool did not grow")
    assert.equal(p0.cuda_allocs, p1.cuda_allocs)
    local want = fh.arange(1, copies + 1, { dtype = "float32" }):view({ copies, 1 }):expand(copies, n):contiguous()
    assert.is_true(fh.equal(want, d:cpu()), "every copy landed its own bytes")
    -- empty_cache waits for the ring's DMAs and gives its memory back
    fh.cuda.empty_cache()
    assert.is_true(fh.cuda.pinned_memory_stats().reserved <= p0.reserved - 24 * 2 ^ 20)
    d:select(1, 2):copy_(fh.full({ n }, -1)) -- and a later copy makes a new ring
    assert.equal(-1, fh.sum(d:select(1, 2)):item() / n)
  end)

  H.gpu_window_it("a non_blocking copy from pageable memory is correct although the source changes at once", function()
    local g = fh.Generator(H.seed("non_blocking pageable"))
    local s = fh.cuda.Stream {}
    local n = 2 ^ 22 + 3 -- float32: 16 MiB + 12 bytes, three chunks: no buffer waits
    local h = fh.rand({ n }, { generator = g })
    local ref = h:clone()
    local d = fh.zeros({ n }, { device = "cuda" })
    fh.cuda.synchronize()
    fh.cuda._spin(200, s)
    d:copy_(h, { stream = s, non_blocking = true })
    assert.is_false(s:query(), "returned before the device copy ran")
    h:fill_(-1)
    h = nil
    U.collect()
    s:synchronize()
    U.assert_same(ref, d)
  end)

  H.gpu_window_it("honours non_blocking and the stream for pinned memory; pageable destinations complete at once", function()
    local g = fh.Generator(H.seed("non_blocking pinned"))
    local s = fh.cuda.Stream {}
    local n = 2 ^ 20
    local src = fh.rand({ n }, { generator = g, device = "cuda" })
    local ref = src:cpu()
    fh.cuda.synchronize()
    local p = fh.empty({ n }, { pin_memory = true })
    fh.cuda._spin(200, s)
    p:copy_(src, { stream = s, non_blocking = true })
    assert.is_false(s:query(), "device to pinned with non_blocking returns at once")
    s:synchronize()
    U.assert_same(ref, p)
    -- pinned to device, non_blocking on a stream
    local d = fh.zeros({ n }, { device = "cuda" })
    fh.cuda.synchronize()
    fh.cuda._spin(200, s)
    d:copy_(p, { stream = s, non_blocking = true })
    assert.is_false(s:query())
    assert.is_true(fh.cuda.default_stream(0):query(), "the copy went to the given stream")
    s:synchronize()
    U.assert_same(ref, d)
    -- blocking copies are complete on return
    fh.cuda._spin(100, s)
    d:copy_(p, { stream = s })
    assert.is_true(s:query())
    -- into pageable memory: complete on return even with non_blocking
    local q = fh.empty({ n })
    fh.cuda._spin(100, s)
    q:copy_(src, { stream = s, non_blocking = true })
    assert.is_true(s:query())
    U.assert_same(ref, q)
  end)

  gpu_it("converts dtypes while copying across devices", function()
    local r = U.rng(H.seed("cross-device casts"))
    for _, sd in ipairs(U.dtypes) do
      for _, dd in ipairs(U.dtypes) do
        if not (sd == "complex128" and dd ~= "complex128") then
          local h = U.random(sd, { 3, 7 }, r)
          local want = fh.empty({ 3, 7 }, { dtype = dd })
          want:copy_(h)
          local gd = fh.empty({ 3, 7 }, { dtype = dd, device = "cuda" })
          gd:copy_(h)
          U.assert_same(want, gd, sd .. " (cpu) -> " .. dd .. " (cuda)")
          local back = fh.empty({ 3, 7 }, { dtype = dd })
          back:copy_(h:cuda())
          U.assert_same(want, back, sd .. " (cuda) -> " .. dd .. " (cpu)")
        end
      end
    end
    local gc = fh.zeros({ 2 }, { dtype = "complex128", device = "cuda" })
    H.expect_error("TypeError", "cannot copy complex128 into float64", function()
      return fh.zeros({ 2 }, { dtype = "float64" }):copy_(gc)
    end)
    H.expect_error("ValueError", "shape mismatch", function()
      return fh.zeros({ 3 }, { device = "cuda" }):copy_(fh.zeros({ 2 }))
    end)
  end)
end)
