-- scripts/bench/soak.lua: long runs with flat memory (issue 19; docs/faults.md, "Soaks").
--   scripts/run scripts/bench/soak.lua [--device cpu|cuda|cuda:N] [--replays N] [--copies N] [--points K]
--                                      [--trim yes|no] [--leak N]
-- Two soaks, one after the other:
--   replays  replays of a captured CKKS program (multiply, relinearize,
--            rescale at fh.Preset.slots8192_scale40_levels7_int64): a
--            CudaGraphProgram on CUDA, a HostGraphProgram on the CPU; default
--            10^6 on CUDA, 2000 on the CPU
--   copies   ReusableValueBuffer:copy_from of a ciphertext and a fresh host
--            tensor made for each call, with garbage tables between calls and
--            a full collection every 100 calls (GC storms); default 10^5 on
--            CUDA, 20000 on the CPU
-- At K (default 10) evenly spaced points (and at 0) each soak waits for the
-- device, runs a full collection and prints one line:
--   soak replays i=<iteration> rss=<bytes> [reserved=<bytes> allocated=<bytes>
--        pinned_reserved=<bytes> pinned_allocated=<bytes>]
-- (host RSS from /proc/self/statm; the device's caching allocator and the
-- pinned allocator on CUDA only), then a detail line that says where the RSS
-- is, not judged:
--   soak replays detail i=<iteration> lua=<bytes> [heap_used=<bytes> heap_held=<bytes>]
-- (LuaJIT's heap; glibc's heap, every arena and mmap'd chunk: bytes in use and
-- bytes held, from mallinfo2). --trim yes returns the C heap's free pages to the
-- system (malloc_trim) before each point, so the RSS counts what is in use, not
-- the heap's high-water mark. After the points, for each curve, the
-- growth per 10^5 iterations from the first point after warm-up to the last
-- (host RSS: from the highest point of that window's first half to the last)
-- (warm-up: the first quarter of the iterations, and at least 20 replays or 1000
-- copies: LuaJIT's heap reaches its high-water mark under the GC storms only
-- after a few collections):
--   soak replays growth rss=<bytes per 1e5> (tolerance <bytes per 1e5>) flat=yes|no
--   soak replays growth reserved=<bytes per 1e5> flat=yes|no      (CUDA: must be exactly 0)
-- --leak N keeps N floats per copy alive (a deliberate leak, to check that the
-- verdict says no; spec/soak_spec.lua runs it).
-- (--replays 0 or --copies 0 skips that soak) and a last line "soak: flat=yes" (every curve of both soaks flat) or
-- "soak: flat=no"; the exit status is 0 for yes, 1 for no.
-- The target is 0 bytes. Device allocator statistics must not move at all
-- after warm-up; host RSS is allowed less than one page per 10^4 iterations
-- over the window, and at least 64 pages in all (the allocators move the RSS
-- without a leak: glibc grows its heap by the request plus a top pad of 128 KiB,
-- 32 pages of 4 KiB, at a time; in a run of 10^6 the per-iteration term is 100
-- pages).
local fh = require "fhelium"
local ex = require "fhelium.execution"
local ffi = require "ffi"

pcall(ffi.cdef, "long sysconf(int name);")
local PAGE = tonumber(ffi.C.sysconf(30)) -- _SC_PAGESIZE
local MIN_PAGES = 64 -- the floor of the host RSS tolerance (above)
-- glibc's heap statistics (every arena) and trim, where the C library has them
pcall(ffi.cdef, [[
struct fh_soak_mallinfo2 { size_t arena, ordblks, smblks, hblks, hblkhd, usmblks, fsmblks, uordblks, fordblks, keepcost; };
struct fh_soak_mallinfo2 mallinfo2(void);
int malloc_trim(size_t pad);
]])
local has_mallinfo = pcall(function() return ffi.C.mallinfo2 end)
local has_trim = pcall(function() return ffi.C.malloc_trim end)

local function usage(msg)
  io.stderr:write("soak: ", msg, "\nusage: soak.lua [--device cpu|cuda|cuda:N] [--replays N] [--copies N] [--points K] [--trim yes|no] [--leak N]\n")
  os.exit(2)
end

local opt = {}
do
  local i = 1
  while i <= #arg do
    local a = arg[i]
    local k = a:match("^%-%-(%a+)$")
    if not k or not ({ device = 1, replays = 1, copies = 1, points = 1, trim = 1, leak = 1 })[k] then usage("unknown option " .. a) end
    local v = arg[i + 1]
    if v == nil then usage(a .. " needs a value") end
    if k == "trim" then
      if v ~= "yes" and v ~= "no" then usage("--trim expects yes or no, got " .. v) end
    elseif k ~= "device" then
      local n = tonumber(v)
      if not n or n < 0 or n % 1 ~= 0 then usage(a .. " expects a non-negative integer, got " .. v) end
      v = n
    end
    opt[k] = v
    i = i + 2
  end
end

local DEV = opt.device or (fh.cuda.is_available() and "cuda" or "cpu")
if DEV ~= "cpu" and DEV ~= "cuda" and not DEV:match("^cuda:%d+$") then usage("--device cpu|cuda|cuda:N, got " .. DEV) end
local cuda = DEV ~= "cpu"
if cuda and not fh.cuda.is_available() then
  io.stderr:write("soak: no CUDA device: ", fh.cuda.unavailable_reason(), "\n")
  os.exit(1)
end
local DEVINDEX = cuda and (tonumber(DEV:match("^cuda:(%d+)$")) or fh.cuda.current_device()) or nil
if cuda then DEV = "cuda:" .. DEVINDEX end
local REPLAYS = opt.replays or (cuda and 1000000 or 2000)
local COPIES = opt.copies or (cuda and 100000 or 20000)
local POINTS = math.max(1, opt.points or 10)
local GC_EVERY = 100
local TRIM = opt.trim == "yes"
local LEAK = opt.leak or 0
if TRIM and not has_trim then usage("--trim yes: this C library has no malloc_trim") end

local function rss()
  local f = assert(io.open("/proc/self/statm", "r"))
  local _, res = f:read("*n", "*n")
  f:close()
  return res * PAGE
end

local function out(...)
  io.stdout:write(table.concat({ ... }, " "), "\n")
  io.stdout:flush()
end

-- one sample: every curve's value at iteration i
local CURVES = cuda and { "rss", "reserved", "allocated", "pinned_reserved", "pinned_allocated" } or { "rss" }
local function sample(i)
  if cuda then fh.cuda.synchronize(DEVINDEX) end
  collectgarbage("collect")
  collectgarbage("collect") -- finalizers of the first pass release what they own
  if cuda then fh.cuda.synchronize(DEVINDEX) end
  if TRIM then ffi.C.malloc_trim(0) end -- free heap pages back to the system before reading the RSS
  local s = { i = i, rss = rss() }
  -- where the RSS is (a detail line, not judged): the C heap's bytes in use and held
  -- (every arena and mmap'd chunk) and LuaJIT's heap
  s.lua = math.floor(collectgarbage("count") * 1024)
  if has_mallinfo then
    local m = ffi.C.mallinfo2()
    s.heap_used = tonumber(m.uordblks + m.hblkhd)
    s.heap_held = tonumber(m.arena + m.hblkhd)
  end
  if cuda then
    local m = fh.cuda.memory_stats(DEVINDEX)
    local p = fh.cuda.pinned_memory_stats()
    s.reserved, s.allocated = m.reserved, m.allocated
    s.pinned_reserved, s.pinned_allocated = p.reserved, p.allocated
  end
  return s
end

local all_flat = true

-- runs step(i) for i = 1..n, sampling at 0 and at POINTS evenly spaced points
local function soak(name, n, warmup_min, step)
  if n == 0 then return out("soak", name, "skipped (0 iterations)") end
  local samples = { sample(0) }
  local function show(s)
    local parts = { "soak", name, "i=" .. s.i }
    for _, c in ipairs(CURVES) do parts[#parts + 1] = ("%s=%d"):format(c, s[c]) end
    out(unpack(parts))
    local d = { "soak", name, "detail", "i=" .. s.i, "lua=" .. s.lua }
    if s.heap_used then d[#d + 1] = ("heap_used=%d heap_held=%d"):format(s.heap_used, s.heap_held) end
    out(unpack(d))
  end
  show(samples[1])
  local t0 = os.clock()
  local nextp = 1
  for i = 1, n do
    step(i)
    if i == math.floor(n * nextp / POINTS) then
      local s = sample(i)
      samples[#samples + 1] = s
      show(s)
      while nextp <= POINTS and math.floor(n * nextp / POINTS) <= i do nextp = nextp + 1 end
    end
  end
  -- warm-up: the first quarter of the iterations, and at least warmup_min (under ASan
  -- the heap has settled as late as 2000 to 6000 copies into a 20000-copy soak)
  local warm = math.max(n * 0.25, warmup_min)
  local first
  for _, s in ipairs(samples) do
    if s.i >= warm and s.i > 0 then first = s break end
  end
  local last = samples[#samples]
  local window = first and (last.i - first.i) or 0
  if window <= 0 then
    out("soak", name, ("growth: too few iterations after a warm-up of %d to measure (n=%d)"):format(warm, n))
    all_flat = false
    return
  end
  for _, c in ipairs(CURVES) do
    local ok
    if c == "rss" then
      -- From the highest point of the window's first half to the last point: the
      -- allocators move the RSS down and back up by a few pages without a leak
      -- (under ASan a dip of 15 pages at the window's first point, then flat, read
      -- as 16 pages of growth from it), while a leak keeps raising every later
      -- point above every earlier one. Over that span the rate tolerance is the same.
      local from = first
      for _, s in ipairs(samples) do
        if s.i >= first.i and s.i <= first.i + window / 2 and s.rss > from.rss then from = s end
      end
      local span, d = last.i - from.i, last.rss - from.rss
      local per = d / span * 1e5
      -- (64 pages: 16 let a single heap growth of 19 pages between two points of a
      -- 60-replay soak under ASan, flat before and after, read as a leak)
      local tol = math.max(PAGE * span / 1e4, MIN_PAGES * PAGE) -- bytes over the span
      ok = d < tol
      out("soak", name, ("growth rss=%.0f bytes per 1e5 (over %d iterations: %d bytes; tolerance %.0f bytes per 1e5: " ..
        "< 1 page per 1e4 iterations, at least " .. MIN_PAGES .. " pages) flat=%s"):format(per, span, d, tol / span * 1e5,
        ok and "yes" or "no"))
    else
      -- device allocator statistics: exactly flat at every point after warm-up
      ok = true
      for _, s in ipairs(samples) do
        if s.i >= first.i and s[c] ~= first[c] then ok = false end
      end
      out("soak", name, ("growth %s=%.0f bytes per 1e5 (target 0, every point after warm-up equal) flat=%s"):format(c,
        (last[c] - first[c]) / window * 1e5, ok and "yes" or "no"))
    end
    all_flat = all_flat and ok
  end
  out("soak", name, ("done: %d iterations, %.1f s CPU"):format(n, os.clock() - t0))
end

out(("soak: device %s, %d replays, %d copies, %d points, page %d bytes"):format(DEV, REPLAYS, COPIES, POINTS, PAGE))

local engine = fh.CkksEngine(fh.Preset.slots8192_scale40_levels7_int64, { device = DEV, seed = 1 })
local sk = engine:create_secret_key()
local pk = engine:create_public_key(sk)
local rlk = engine:create_relinearization_key(sk)
local msg = { 0.5, -0.25, 0.125, 1 }
local ct = engine:coefficient_domain_to_ntt_domain(engine:encrypt_message(msg, pk))

-- ---- replays of a captured CKKS program -----------------------------------------
do
  local Program = cuda and ex.CudaGraphProgram or ex.HostGraphProgram
  local function f(x) return engine:rescale_to_next_level(engine:relinearize(engine:multiply(x, x), rlk)) end
  local prog = Program.capture(f, { example_inputs = { ct }, warmup = 2 })
  local function check(what)
    local d = engine:decrypt_message(prog:replay({ ct }, { copy_output = true }), sk, { is_real = true }):tolist()
    for j = 1, #msg do
      local got = type(d[j]) == "table" and d[j][1] or d[j]
      if math.abs(got - msg[j] ^ 2) > 1e-3 then error(("soak: %s: slot %d is %g, expected %g"):format(what, j, got, msg[j] ^ 2)) end
    end
  end
  check("replay before the soak")
  soak("replays", REPLAYS, 20, function(i)
    prog:replay({ ct })
    -- bound the queue of launches (a replay is ordered after the previous one)
    if cuda and i % 1000 == 0 then prog:synchronize() end
  end)
  check("replay after the soak")
  prog:close()
end

-- ---- copy_from with GC storms ---------------------------------------------------------
do
  local LEAF = 4096
  local host_ct = cuda and ex.pin_value_tree(ct:cpu()) or ct
  local buf = ex.ReusableValueBuffer.like({ host_ct, fh.zeros({ LEAF }) }, { device = DEV })
  local h
  local junk
  local leaked = {}
  soak("copies", COPIES, 1000, function(i)
    h = buf:copy_from({ host_ct, fh.full({ LEAF }, i % 7) }, { non_blocking = true })
    if LEAK > 0 then leaked[i] = fh.zeros({ LEAK }) end -- --leak: a deliberate leak the verdict must catch
    junk = {}
    for j = 1, 16 do junk[j] = { j, tostring(i + j), { i } } end
    if i % GC_EVERY == 0 then
      collectgarbage("collect")
      h:synchronize()
    end
  end)
  if h then -- (nil when the copy soak is skipped: --copies 0)
    h:synchronize()
    local v = buf.value
    if not v[1]:cpu():equal(host_ct:cpu()) or v[2]:cpu():tolist()[1] ~= COPIES % 7 then
      error("soak: the buffer's content after the copies")
    end
  end
  buf:close()
end

out("soak: flat=" .. (all_flat and "yes" or "no"))
os.exit(all_flat and 0 or 1)
