-- claims.lua — wrk script for tests/bench/claims.sh: POST /v1/runs.
--
--   wrk -t2 -c32 -d20s --latency -s claims.lua URL -- new RUN
--   wrk -t2 -c32 -d20s --latency -s claims.lua URL -- existing RUN COUNT
--
-- new       every request claims a key nobody used before,
--           bench:RUN:THREAD:N, and must be answered 201 "claimed".
-- existing  requests cycle through the COUNT keys bench:RUN:done:1..COUNT
--           that claims.sh created and moved to `completed` beforehand
--           (payload {"lead":I,"source":"bench"}), and must be answered 200
--           "duplicate".
--
-- The API key comes from the environment (ONCEGATE_API_KEY), never from the
-- command line. Any other answer is counted; done() prints the count, one
-- sample of a wrong answer, and a machine-readable line for claims.sh:
--   bench-result requests=R duration_us=D p50_us=P p99_us=Q bad=B errors=E
-- where errors are wrk's socket errors (connect, read, write, timeout).

-- setup() and the threads done() reads (wrklib.lua, beside this script)
dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "wrklib.lua")

-- Per thread (each wrk thread has its own Lua state). bad, sample,
-- want_status and want_outcome are globals so that done(), which runs in
-- the main state, can read them with thread:get().
local mode, run, count
local n = 0
bad, sample = 0, ""

function init(args)
	mode, run = args[1], args[2]
	if mode ~= "new" and mode ~= "existing" or run == nil then
		error("usage: -- new RUN | -- existing RUN COUNT")
	end
	local key = os.getenv("ONCEGATE_API_KEY")
	if key == nil or key == "" then
		error("ONCEGATE_API_KEY is not set")
	end
	wrk.method = "POST"
	wrk.path = "/v1/runs"
	wrk.headers["Authorization"] = "Bearer " .. key
	wrk.headers["Content-Type"] = "application/json"
	if mode == "new" then
		want_status, want_outcome = 201, '"outcome":"claimed"'
	else
		count = tonumber(args[3])
		if count == nil or count < 1 then
			error("existing: COUNT must be a positive number")
		end
		want_status, want_outcome = 200, '"outcome":"duplicate"'
		-- Threads start at different places in the key set.
		n = ((id - 1) * 7919) % count
	end
end

local function body(key, lead)
	return string.format(
		'{"key":"%s","payload":{"lead":%d,"source":"bench"},'
			.. '"workflow_version":"bench@1","trigger":"bench"}',
		key, lead)
end

function request()
	n = n + 1
	if mode == "new" then
		return wrk.format(nil, nil, nil,
			body(string.format("bench:%s:%d:%d", run, id, n), n))
	end
	local i = (n - 1) % count + 1
	return wrk.format(nil, nil, nil,
		body(string.format("bench:%s:done:%d", run, i), i))
end

function response(status, headers, resp)
	if status ~= want_status or not string.find(resp, want_outcome, 1, true) then
		bad = bad + 1
		if sample == "" then
			sample = status .. " " .. string.sub(resp, 1, 300)
		end
	end
end

function done(summary, latency, requests)
	local total_bad, first = 0, ""
	local want_s, want_o = threads[1]:get("want_status"), threads[1]:get("want_outcome")
	for _, t in ipairs(threads) do
		total_bad = total_bad + t:get("bad")
		local s = t:get("sample")
		if first == "" and s ~= nil then first = s end
	end
	local e = summary.errors
	local errors = e.connect + e.read + e.write + e.timeout
	io.write(string.format("unexpected answers (want %d %s): %d\n",
		want_s or 0, want_o or "", total_bad))
	if first ~= "" then
		io.write("first unexpected answer: " .. first .. "\n")
	end
	io.write(string.format(
		"bench-result requests=%d duration_us=%d p50_us=%.0f p99_us=%.0f bad=%d errors=%d\n",
		summary.requests, summary.duration, latency:percentile(50),
		latency:percentile(99), total_bad, errors))
end
