-- The soak benchmark (scripts/bench/soak.lua, docs/faults.md "Soaks"), short,
-- on the CPU, in a subprocess: its lines have the documented format, each
-- soak prints its points and a growth line per curve, and the verdict is yes.
-- This is the CI's CPU soak (the long ones run on the GPU machine).
local cli = require "spec.support.cli"

local SOAK = cli.root .. "/scripts/bench/soak.lua"

-- Under a sanitized build (CI's sanitizer stage), ASan's quarantine holds
-- freed memory back for a while, and detect_stack_use_after_return (set by
-- .ci/run) gives calls frames on fake stacks that grow for many iterations
-- (about 27 KB per replay over 60 replays): the RSS grows without a leak, so
-- the soak runs with both off (ignored by other builds).
local asan = os.getenv("ASAN_OPTIONS")
asan = (asan and asan ~= "" and (asan .. ":") or "") ..
  "quarantine_size_mb=0:thread_local_quarantine_size_kb=0:detect_stack_use_after_return=0"

local function soak(args)
  local words = { "timeout 300", cli.quote(cli.bin), cli.quote(SOAK) }
  for _, a in ipairs(args) do words[#words + 1] = cli.quote(a) end
  return cli.sh(table.concat(words, " "), { env = { ASAN_OPTIONS = asan } })
end

describe("scripts/bench/soak.lua", function()
  it("a short CPU soak prints its points, one growth line per curve, and flat=yes", function()
    -- 20000 copies: 15000 measured after the warm-up of a quarter. The heap can
    -- settle late: 17 pages over 1800 copies in one run on a loaded CI machine, 20
    -- pages between copies 1000 and 2000 under ASan in another, and 16 pages
    -- between copies 2000 and 6000 under ASan in a third (2026-12-04), flat after;
    -- 19 pages between replays 42 and 48 of 60 under ASan (2026-12-07): the
    -- tolerance's floor is 64 pages.
    local r = soak { "--device", "cpu", "--replays", "60", "--copies", "20000", "--points", "10" }
    local what = ("exit %s\nstdout:\n%s\nstderr:\n%s"):format(tostring(r.code), r.stdout, r.stderr)
    assert(r.code == 0, what)
    assert(r.stderr == "", what)
    local lines = cli.lines(r.stdout)
    assert(lines[1]:find("^soak: device cpu, 60 replays, 20000 copies, 10 points, page %d+ bytes$"), what)
    for _, name in ipairs { "replays", "copies" } do
      local n = name == "replays" and 60 or 20000
      local points, growth, done = {}, 0, false
      for _, l in ipairs(lines) do
        local i, rss = l:match("^soak " .. name .. " i=(%d+) rss=(%d+)$")
        if i then
          points[#points + 1] = tonumber(i)
          assert(tonumber(rss) > 0, l)
        end
        if l:find("^soak " .. name .. " growth rss=%-?%d+ bytes per 1e5 %(over %d+ iterations: %-?%d+ bytes; " ..
            "tolerance %d+ bytes per 1e5: < 1 page per 1e4 iterations, at least 64 pages%) flat=yes$") then
          growth = growth + 1
        end
        if l:find("^soak " .. name .. " done: " .. n .. " iterations, [%d.]+ s CPU$") then done = true end
      end
      -- 0 and ten evenly spaced points, the last at n
      assert(#points == 11, name .. ": expected 11 points: " .. what)
      assert(points[1] == 0 and points[11] == n, name .. ": first and last point: " .. what)
      for k = 2, 11 do assert(points[k] > points[k - 1], name .. ": points in order: " .. what) end
      assert(growth == 1, name .. ": one flat rss growth line (the CPU has no device curves): " .. what)
      assert(done, name .. ": the done line: " .. what)
    end
    assert(lines[#lines] == "soak: flat=yes", what)
  end)

  it("says no (exit status 1) when a soak is too short to measure after warm-up", function()
    local r = soak { "--device", "cpu", "--replays", "5", "--copies", "10", "--points", "2" }
    local what = ("exit %s\nstdout:\n%s\nstderr:\n%s"):format(tostring(r.code), r.stdout, r.stderr)
    assert(r.code == 1, what)
    assert(r.stdout:find("soak copies growth: too few iterations after a warm%-up of 1000 to measure %(n=10%)"), what)
    assert(cli.lines(r.stdout)[#cli.lines(r.stdout)] == "soak: flat=no", what)
  end)

  it("says no (exit status 1) for a deliberate leak of 64 floats per copy", function()
    -- --trim yes: without it a small leak first fills pages the C heap already
    -- holds (resident, free), and the RSS of a short run need not move
    local r = soak { "--device", "cpu", "--replays", "0", "--copies", "3000", "--leak", "64", "--trim", "yes" }
    local what = ("exit %s\nstdout:\n%s\nstderr:\n%s"):format(tostring(r.code), r.stdout, r.stderr)
    assert(r.code == 1, what)
    assert(r.stdout:find("\nsoak copies growth rss=%d+ bytes per 1e5 %(over %d+ iterations: %d+ bytes; tolerance %d+ " ..
      "bytes per 1e5: < 1 page per 1e4 iterations, at least 64 pages%) flat=no\n"), what)
    assert(cli.lines(r.stdout)[#cli.lines(r.stdout)] == "soak: flat=no", what)
  end)

  it("skips a soak given 0 iterations", function()
    local r = soak { "--device", "cpu", "--replays", "0", "--copies", "3000" }
    local what = ("exit %s\nstdout:\n%s\nstderr:\n%s"):format(tostring(r.code), r.stdout, r.stderr)
    assert(r.code == 0, what)
    assert(r.stdout:find("\nsoak replays skipped %(0 iterations%)\n"), what)
    assert(not r.stdout:find("soak replays i="), what)
    assert(r.stdout:find("soak copies growth rss="), what)
  end)

  it("rejects unknown options and bad counts with status 2", function()
    local r = soak { "--replay", "3" }
    assert(r.code == 2 and r.stderr:find("soak: unknown option %-%-replay"), r.stderr)
    r = soak { "--copies", "2.5" }
    assert(r.code == 2 and r.stderr:find("soak: %-%-copies expects a non%-negative integer, got 2.5"), r.stderr)
    r = soak { "--leak", "-1" }
    assert(r.code == 2 and r.stderr:find("soak: %-%-leak expects a non%-negative integer, got %-1"), r.stderr)
  end)
end)
