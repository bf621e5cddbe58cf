-- scripts/bench/buffer_copy.lua: ReusableValueBuffer:copy_from against plain
-- cudaMemcpyAsync (fhelium_bench_exec_baseline, built by CMake when CUDA is
-- on), in one run, printing ratios. On a GPU machine after building:
--   source scripts/env.sh && luajit scripts/bench/buffer_copy.lua [path/to/fhelium_bench_exec_baseline]
-- Measures (medians, host wall clock):
--   large tree   copy_from of a 64 MiB tree (4 leaves of 16 MiB, pinned host)
--                into a CUDA buffer + synchronize, against one cudaMemcpyAsync of
--                64 MiB; target: overhead under 5%
--   small tree   host time of one copy_from of a tree with one 4 KiB leaf
--                (pinned), enqueue only, averaged over 1000 calls; target:
--                under 10 us (baseline: cudaMemcpyAsync + cudaEventRecord)
--   double buffering  16 tiles of 16 MiB through two CUDA buffers: copies on a
--                transfer stream, a compute kernel as long as one copy on a
--                compute stream, each copy waiting (wait_for) for the compute
--                that last read its buffer; target: total <= 1.15 x
--                max(copy, compute) x 16
local fh = require "fhelium"
local ex = require "fhelium.execution"
local lib = dofile((arg[0]:match("^(.*)/") or ".") .. "/lib.lua")
local now_us, median = lib.now_us, lib.median

lib.require_cuda(fh)

local base = lib.run_baseline(lib.baseline_path("fhelium_bench_exec_baseline"))

local rows = {}
local function row(name, value, unit, baseline, ratio, target, ok)
  rows[#rows + 1] = { name, value, unit, baseline, ratio, target, ok }
end

-- ---- large tree: 64 MiB in 4 leaves -----------------------------------------------
do
  local M = 4 * 2 ^ 20 -- float32 elements per 16 MiB leaf
  local l = {}
  for i = 1, 4 do l[i] = fh.full({ M }, i, { pin_memory = true }) end
  local src = { a = l[1], b = { l[2], l[3] }, c = ex.tuple(l[4]) }
  assert(ex.value_tree_nbytes(src) == 64 * 2 ^ 20)
  local buf = ex.ReusableValueBuffer.like(src, { device = "cuda:0" })
  local s = fh.cuda.Stream()
  local t = {}
  for r = -3, 21 do
    s:synchronize()
    local t0 = now_us()
    buf:copy_from(src, { stream = s }):synchronize()
    if r >= 1 then t[r] = now_us() - t0 end
  end
  local v = buf.value
  assert(fh.equal(v.a, l[1]) and fh.equal(v.b[2], l[3]) and fh.equal(v.c[1], l[4]), "large copy: wrong contents")
  local us = median(t)
  local ratio = us / base.memcpy_64mib_us
  row("copy_from 64 MiB tree (4 leaves), pinned -> cuda", us, "us", base.memcpy_64mib_us, ratio, "<= 1.05", ratio <= 1.05)
  buf:close()
end

-- ---- small tree: one 4 KiB leaf, host time per call -----------------------------------
do
  local src = { fh.rand({ 1024 }, { pin_memory = true }) }
  local buf = ex.ReusableValueBuffer.like(src, { device = "cuda:0" })
  local s = fh.cuda.Stream()
  local opts = { stream = s }
  local t = {}
  for r = -3, 21 do
    s:synchronize()
    local t0 = now_us()
    for _ = 1, 1000 do buf:copy_from(src, opts) end
    if r >= 1 then t[r] = (now_us() - t0) / 1000 end
  end
  s:synchronize()
  assert(fh.equal(buf.value[1], src[1]), "small copy: wrong contents")
  local us = median(t)
  row("copy_from 4 KiB tree, host time per call", us, "us", base.memcpy_4kib_host_us, us / base.memcpy_4kib_host_us,
    "< 10 us", us < 10)
  buf:close()
end

-- ---- double buffering over 16 tiles ---------------------------------------------------
do
  local TILES, M = 16, 4 * 2 ^ 20 -- 16 MiB float32 tiles
  local tiles = {}
  for i = 1, TILES do tiles[i] = { fh.full({ M }, i, { pin_memory = true }) } end
  local bufs = { ex.ReusableValueBuffer.like(tiles[1], { device = "cuda:0" }),
    ex.ReusableValueBuffer.like(tiles[1], { device = "cuda:0" }) }
  local transfer, compute = fh.cuda.Stream(), fh.cuda.Stream()
  local sums = {}
  -- one copy, alone
  local tc = {}
  for r = -2, 9 do
    transfer:synchronize()
    local t0 = now_us()
    bufs[1]:copy_from(tiles[1], { stream = transfer }):synchronize()
    if r >= 1 then tc[r] = now_us() - t0 end
  end
  local copy_us = median(tc)
  -- the compute step: a kernel as long as the copy, then a reduction of the tile
  local function compute_step(buf)
    fh.cuda._spin(copy_us / 1000, compute)
    return fh.sum(buf.value[1])
  end
  local tk = {}
  for r = -2, 9 do
    compute:synchronize()
    local t0 = now_us()
    fh.cuda.with_stream(compute, function() compute_step(bufs[1]) end)
    compute:synchronize()
    if r >= 1 then tk[r] = now_us() - t0 end
  end
  local compute_us = median(tk)
  local tt = {}
  for r = -1, 7 do
    fh.cuda.synchronize()
    local read_done = {}
    local t0 = now_us()
    for i = 1, TILES do
      local k = (i - 1) % 2 + 1
      local h = bufs[k]:copy_from(tiles[i], { stream = transfer, wait_for = read_done[k] })
      h:wait_on(compute)
      sums[i] = fh.cuda.with_stream(compute, function() return compute_step(bufs[k]) end)
      read_done[k] = compute:record_event()
    end
    compute:synchronize()
    if r >= 1 then tt[r] = now_us() - t0 end
  end
  for i = 1, TILES do
    assert(math.abs(sums[i]:item() - i * M) < 1e-6 * i * M, "double buffering: tile " .. i .. " has a wrong sum")
  end
  local total = median(tt)
  local ideal = math.max(copy_us, compute_us) * TILES
  local ratio = total / ideal
  row(("double buffering, 16 tiles (copy %.0f us, compute %.0f us)"):format(copy_us, compute_us), total, "us", ideal,
    ratio, "<= 1.15", ratio <= 1.15)
end

print()
print(("%-62s %12s %12s %8s %10s  %s"):format("measure", "fhelium", "baseline", "ratio", "target", "ok"))
for _, r in ipairs(rows) do
  print(("%-62s %9.2f %-2s %12.2f %8.3f %10s  %s"):format(r[1], r[2], r[3], r[4], r[5], r[6], r[7] and "yes" or "NO"))
end
