-- scripts/bench/graph_gap.lua: which fhelium work puts the process into the
-- two-stream state (scripts/bench/README.md, "The two-stream state": once
-- kernels have been launched eagerly on two streams, every CUDA graph
-- launched afterwards runs its kernel nodes ~175 ns further apart). The raw
-- CUDA graph of exec_baseline.cu (100 chained adds, its own cudaMalloc'd
-- buffers, a fresh cudaStream, captured and launched by hand) and the
-- timeline probe (fh.cuda._raw_graph_probe: kernel time, gap between nodes,
-- SM clock) run inside a fresh fhelium process twice: right after the module
-- is loaded, then after one kind of fhelium work (each variant in its own
-- process). The baseline program's own number is the reference.
-- fhelium_bench_gap_probe (gap_probe.cu) does the same for plain CUDA calls.
-- On a GPU machine after building:
--   source scripts/env.sh && luajit scripts/bench/graph_gap.lua
-- (`luajit scripts/bench/graph_gap.lua <variant>` runs one variant.)
local fh = require "fhelium"

-- Helpers for the program-shaped variants.
local function cuda_pair()
  return fh.rand({ 4096 }, { device = "cuda" }), fh.rand({ 4096 }, { device = "cuda" })
end
-- two fresh tensors filled by a device copy on the caller's stream (as a
-- buffer's leaves are), synchronized
local function copied_pair()
  local x, w = cuda_pair()
  local a, b = fh.empty({ 4096 }, { device = "cuda" }), fh.empty({ 4096 }, { device = "cuda" })
  a:copy_(x)
  b:copy_(w)
  fh.cuda.synchronize()
  return a, b
end
local function inplace(k)
  return function(x, w)
    for _ = 1, k do x:add_(w) end
    return x
  end
end
local function outofplace(x, w)
  for _ = 1, 100 do x = x + w end
  return x
end
-- capture `fn` as a CudaGraphProgram with `warmup`; closed unless `keep`
local function program(fn, warmup, keep)
  return function()
    local ex = require "fhelium.execution"
    local x, w = cuda_pair()
    local p = ex.CudaGraphProgram.capture(fn, { example_inputs = { x, w }, warmup = warmup })
    if keep then return p end
    p:close()
    collectgarbage()
  end
end
-- The program's steps by hand (lua/fhelium/programs.lua): an eager "warmup"
-- of 100 in-place adds on the side stream, over a fresh input buffer
-- (`fresh_buffer`) or plain tensors, optionally checked and closed before the
-- capture of the in-place chain on the side stream.
local function by_hand(opts)
  return function()
    local core = fh.core
    local x, w = cuda_pair()
    local prog = core.program_new("cuda", core.buffer_like({ x, w }, nil, "example_inputs"))
    local side = prog.side_stream
    local fresh, a
    if opts.fresh_buffer and opts.buffer_on_side then
      -- the buffer made (and filled) on the side stream: its leaves' home
      -- stream is the side stream, so the adds record no other stream
      fh.cuda.with_stream(side, function()
        fresh = core.buffer_like({ x, w }, { device = "cuda:0" }, "example_inputs")
      end)
      a = fresh.value
    elseif opts.fresh_buffer then
      fresh = core.buffer_like({ x, w }, { device = "cuda:0" }, "example_inputs")
      a = fresh.value
    elseif opts.copied then
      a = { copied_pair() }
    else
      a = { cuda_pair() }
    end
    local out = fh.cuda.with_stream(side, function() return inplace(100)(a[1], a[2]) end)
    if opts.check then prog:_check_output(out, "output") end
    side:synchronize()
    if fresh and opts.close_before then fresh:close() end
    local args = prog:_input_value()
    prog:_capture_begin()
    inplace(100)(args[1], args[2])
    prog:_capture_end(true)
    prog:_set_output(args[1])
    prog:_instantiate()
    prog:_launch(true)
    prog:close()
    if fresh and not opts.close_before then fresh:close() end
  end
end

local variants = {
  { "bare", "nothing (the module loaded, the device initialised)", function() end },
  { "alloc", "a CUDA tensor (the caching allocator's first segment)", function()
    local x = fh.rand({ 4096 }, { device = "cuda" })
    fh.cuda.synchronize()
    return x
  end },
  { "stream", "a fhelium stream made current", function() fh.cuda.set_stream(fh.cuda.Stream()) end },
  { "eager", "1000 eager adds", function()
    local x, w = fh.rand({ 4096 }, { device = "cuda" }), fh.rand({ 4096 }, { device = "cuda" })
    for _ = 1, 1000 do x = x + w end
    fh.cuda.synchronize()
  end },
  { "pinned", "a pinned host tensor", function() return fh.rand({ 1024 }, { pin_memory = true }) end },
  { "pageable", "a 16 MiB pageable host-to-device copy (staging, host threads)", function()
    local x = fh.rand({ 4194304 }):cuda()
    fh.cuda.synchronize()
    return x
  end },
  { "side_eager", "1000 eager adds on a fresh fhelium stream (as a warmup runs)", function()
    local s = fh.cuda.Stream()
    fh.cuda.with_stream(s, function()
      local x, w = fh.rand({ 4096 }, { device = "cuda" }), fh.rand({ 4096 }, { device = "cuda" })
      for _ = 1, 1000 do x = x + w end
    end)
    fh.cuda.synchronize()
  end },
  { "pool_capture", "fh.cuda._capture of 100 adds (pool, capture, one replay; no program)", function()
    local x, w = fh.rand({ 4096 }, { device = "cuda" }), fh.rand({ 4096 }, { device = "cuda" })
    assert(fh.cuda._capture(function()
      local y = x
      for _ = 1, 100 do y = y + w end
      return y
    end, 1))
    collectgarbage()
  end },
  { "inplace_w0", "a CudaGraphProgram of 100 in-place adds, warmup = 0 (no allocation)", program(inplace(100), 0) },
  { "inplace_k1", "a CudaGraphProgram of one in-place add, warmup = 0", program(inplace(1), 0) },
  { "inplace_w1", "a CudaGraphProgram of 100 in-place adds, warmup = 1, closed", program(inplace(100), 1) },
  { "inplace_w3", "a CudaGraphProgram of 100 in-place adds, warmup = 3, closed", program(inplace(100), 3) },
  { "program", "a K = 100 CudaGraphProgram captured and closed", program(outofplace, 3) },
  { "program_w0", "a K = 100 CudaGraphProgram (out of place), warmup = 0, closed", program(outofplace, 0) },
  { "program_alive", "a K = 100 CudaGraphProgram captured and kept", program(outofplace, 3, true) },
  { "program_empty", "a K = 100 CudaGraphProgram captured, closed, then fh.cuda.empty_cache()", function()
    program(outofplace, 3)()
    fh.cuda.synchronize()
    fh.cuda.empty_cache()
  end },
  { "buffer", "a ReusableValueBuffer of two CUDA tensors made and closed", function()
    local ex = require "fhelium.execution"
    local b = ex.ReusableValueBuffer.like({ cuda_pair() })
    fh.cuda.synchronize()
    b:close()
  end },
  { "buffer_adds", "in-place adds on a fresh buffer's value on a fresh stream, then close", function()
    local ex = require "fhelium.execution"
    local b = ex.ReusableValueBuffer.like({ cuda_pair() })
    local s, v = fh.cuda.Stream(), b.value
    fh.cuda.with_stream(s, function() inplace(100)(v[1], v[2]) end)
    s:synchronize()
    b:close()
  end },
  { "plain_adds", "in-place adds on plain tensors on a fresh stream", function()
    local x, w = cuda_pair()
    local s = fh.cuda.Stream()
    fh.cuda.with_stream(s, function() inplace(100)(x, w) end)
    s:synchronize()
  end },
  { "eager_then_w0", "100 eager in-place adds on a fresh stream, then a warmup = 0 program", function()
    local x, w = cuda_pair()
    local s = fh.cuda.Stream()
    fh.cuda.with_stream(s, function() inplace(100)(x, w) end)
    s:synchronize()
    program(inplace(100), 0)()
  end },
  { "eager_then_pool", "100 eager in-place adds, then fh.cuda._capture of 100 in-place adds", function()
    local x, w = cuda_pair()
    inplace(100)(x, w)
    fh.cuda.synchronize()
    assert(fh.cuda._capture(function() return inplace(100)(x, w) end, 1))
  end },
  { "side_eager_capture", "program steps by hand: eager adds on plain tensors on the side stream, then capture on it",
    by_hand {} },
  { "hand_check", "program steps by hand, warmup on a fresh buffer, output checked, buffer closed",
    by_hand { fresh_buffer = true, check = true, close_before = true } },
  { "hand_nocheck", "program steps by hand, warmup on a fresh buffer, buffer closed",
    by_hand { fresh_buffer = true, close_before = true } },
  { "hand_noclose", "program steps by hand, warmup on a fresh buffer closed only after the program",
    by_hand { fresh_buffer = true } },
  -- the bisection of the trigger (hand_* above were slow; the next ones split them)
  { "hand_copied", "program steps by hand, warmup on plain tensors filled by a device copy",
    by_hand { copied = true } },
  { "hand_buffer_on_side", "program steps by hand, warmup on a fresh buffer made on the side stream",
    by_hand { fresh_buffer = true, buffer_on_side = true, close_before = true } },
  { "copy_only", "plain tensors filled by a device copy on the caller's stream, synchronized", function()
    copied_pair()
  end },
  { "copy_side_adds", "device-copied tensors, then 100 in-place adds on a fresh stream (no capture)", function()
    local a, b = copied_pair()
    local s = fh.cuda.Stream()
    fh.cuda.with_stream(s, function() inplace(100)(a, b) end)
    s:synchronize()
  end },
  { "copy_pool", "device-copied tensors, then fh.cuda._capture of 100 in-place adds on them", function()
    local a, b = copied_pair()
    assert(fh.cuda._capture(function() return inplace(100)(a, b) end, 1))
  end },
  { "copy_side_pool", "device-copied tensors, 100 adds on a fresh stream, then fh.cuda._capture of 100 adds", function()
    local a, b = copied_pair()
    local s = fh.cuda.Stream()
    fh.cuda.with_stream(s, function() inplace(100)(a, b) end)
    s:synchronize()
    assert(fh.cuda._capture(function() return inplace(100)(a, b) end, 1))
  end },
  { "d2d_raw", "one device-to-device tensor copy (cudaMemcpyAsync), nothing else", function()
    local x = fh.rand({ 4096 }, { device = "cuda" })
    local y = fh.empty({ 4096 }, { device = "cuda" })
    y:copy_(x)
    fh.cuda.synchronize()
  end },
}

if not fh.cuda.is_available() then
  io.stderr:write("graph_gap: no CUDA device: ", fh.cuda.unavailable_reason(), "\n")
  os.exit(1)
end

if arg[1] then
  for _, v in ipairs(variants) do
    if v[1] == arg[1] then
      -- the raw graph, then the timeline probe (us/replay, kernel ns, gap ns, SM MHz)
      local function probe()
        return ("probe %.1f us, kernel %.0f ns, gap %.0f ns, SM %.0f MHz"):format(fh.cuda._raw_graph_probe(100))
      end
      local before = fh.cuda._raw_graph_bench(100, false)
      local pbefore = probe()
      local keep = v[3]() -- luacheck: ignore keep
      local after = fh.cuda._raw_graph_bench(100, false)
      local pafter = probe()
      local lim, parts = fh.cuda._context_limits(), {}
      for k, x in pairs(lim) do parts[#parts + 1] = ("%s=%.0f"):format(k, x) end
      table.sort(parts)
      print(("%s %.3f %.3f"):format(v[1], before, after))
      print("before " .. pbefore)
      print("after  " .. pafter)
      print("limits " .. table.concat(parts, " "))
      os.exit(0)
    end
  end
  io.stderr:write("graph_gap: unknown variant ", arg[1], "\n")
  os.exit(1)
end

local build = os.getenv("FHELIUM_BUILD") or "build"
local function baseline()
  local p = assert(io.popen(build .. "/fhelium_bench_exec_baseline 2>&1"))
  local us, parts = nil, {}
  for line in p:lines() do
    local v = line:match("^graph_K100_us%s+(%S+)$")
    if v then us = tonumber(v) end
    local k, x = line:match("^limit_(%S+)%s+(%S+)$")
    if k then parts[#parts + 1] = ("%s=%s"):format(k, x) end
  end
  p:close()
  table.sort(parts)
  return us, "limits " .. table.concat(parts, " ")
end
local self = arg[0]
local exe = arg[-1] or "luajit"
local b0, blim = baseline()
local limits = { "baseline " .. blim }
print(("%-15s %12s %12s  %s"):format("variant", "raw before", "raw after", "fhelium work between"))
print(("%-15s %9.3f us %12s  %s"):format("baseline", b0, "", "the baseline process (exec_baseline.cu)"))
for _, v in ipairs(variants) do
  local p = assert(io.popen(("%s %s %s 2>&1"):format(exe, self, v[1])))
  local out = p:read("*a")
  p:close()
  local name, before, after = out:match("(%S+) (%S+) (%S+)")
  local lim = out:match("(limits [^\n]*)")
  if lim then limits[#limits + 1] = v[1] .. " " .. lim end
  if name then
    print(("%-15s %9.3f us %9.3f us  %s"):format(name, tonumber(before), tonumber(after), v[2]))
    for l in out:gmatch("\n(%a+%s*probe[^\n]*)") do print("                " .. l) end
  else
    print(("%-15s failed: %s"):format(v[1], out))
  end
end
print(("%-15s %9.3f us %12s  %s"):format("baseline", baseline(), "", "the baseline process again"))
print()
for _, l in ipairs(limits) do print(l) end
