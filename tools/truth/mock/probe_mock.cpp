// probe_mock.cpp - the ground-truth probe with MOCK GPU devices (mock_gpu.cpp): memfit's placement harness.
// (Started as the shared ground-truth folder's mem_probe_mock.cpp; layer_bufts counts the tensors per buffer type of
// each layer, io_tensors names every buffer type a tensor outside the layers is in.)
//
// Registers N mock GPU devices with ggml's backend registry BEFORE the CPU backend is loaded, then
// loads a GGUF with real llama.cpp (libllama) and creates a context, exactly as mem_probe does, and
// prints ONE JSON line. With no_alloc=1 this is llama.cpp's own dry run (what common_fit_params uses):
// llama.cpp places every weight / KV / recurrent / compute / output buffer on the CPU, the host buffer
// type or a mock device, and reports the sizes it would allocate. All old mem_probe fields are kept
// (same names, same order); new fields are appended.
//
// usage: probe_mock MODEL.gguf key=value ...
//   old keys: n_ctx n_seq n_batch n_ubatch n_rs_seq threads type_k type_v fa(on|off|auto) unified swa_full
//             mmap(0|1) decode(N) no_alloc(0|1) backend_dir tag
//   mock devices:
//     mock_gpus=N            number of mock GPUs (0 = none: identical to mem_probe)
//     mock_name=MOCK         device names MOCK0.., buffer types MOCK0.., host buffer type MOCK_Host
//     mock_desc=...          device description
//     mock_total_mib=a[,b..] total memory per device (one value: all devices; default 24576)
//     mock_free_mib=a[,b..]  free memory per device (default = total)
//     mock_align=128         device buffer alignment (CUDA 128)
//     mock_max_mib=0         max size of one device buffer (0 = unlimited, as CUDA)
//     mock_alloc=plain|cuda  get_alloc_size rule (cuda: + padding row for quantized tensors with ne0 % 512 != 0)
//     mock_fa_alloc=0|1      with mock_alloc=cuda: also model CUDA's F16 K/V copies for FLASH_ATTN_EXT
//     mock_async=1 mock_events=1   device caps (pipeline parallelism needs both)
//     mock_host=1            provide the host (pinned) buffer type (CUDA: 1 unless GGML_CUDA_NO_PINNED)
//     mock_src_check=1       supports_op false for sources on another mock device (as CUDA)
//     mock_offload_batch=32  offload_op threshold (GGML_OP_OFFLOAD_MIN_BATCH); 0 = no offload_op
//     mock_unsupported=A,B   ops reported unsupported: ggml op names (FLASH_ATTN_EXT), unary/glu names, or OP:type
//     mock_moe_dep=0|1       graph_optimize adds ggml-cuda's MoE allocation dependencies (fused weighted expert sum)
//   llama.cpp launcher settings:
//     ngl=N|all|auto         n_gpu_layers (all/auto = -1 = llama default; default 0 when mock_gpus=0)
//     split=layer|row|none|tensor   split_mode (default layer)
//     main_gpu=0
//     ts=a,b,...             tensor_split
//     ot=REGEX=BUFT;...      tensor buffer-type overrides (BUFT = a device buffer type name: CPU, MOCK0, ...)
//     n_cpu_moe=N            --n-cpu-moe N (first N layers' expert tensors -> CPU)
//     cpu_moe=1              --cpu-moe
//     n_cpu_ffn=N            --n-cpu-ffn N (first N layers' dense FFN tensors -> CPU)
//     kv_offload=0|1         offload_kqv (--no-kv-offload = 0)
//     op_offload=0|1         (--no-op-offload = 0)
//     no_host=0|1            (--no-host)
//     repack=0|1             use_extra_bufts (--no-repack = 0)
//     dev=MOCK0,MOCK1|none   explicit device list (-dev)
//   fitter (llama.cpp's common_fit_params from libllama-common, as llama-server/-cli run it by default):
//     fit=1                  fit unset params to the mock devices' free memory, then load with the fitted params
//     fit_margin_mib=1024    margin per device (one value or a list)
//     fit_min_ctx=4096       n_ctx_min;  n_ctx=0 lets the fitter choose the context size
//     fit_verbose=0|1        print the fitter's trace log to stderr
//   llama-server's --spec-type draft-mtp (as the CPU probe tools/truth/probe.cpp):
//     mtp=1                  the model loaded with load_mtp (common_model_params_to_llama under draft-mtp)
//     mtp_ctx=1              mtp=1, and the MTP draft context beside the target: with fit=1 common_fit_params gets
//                            common_init_result's common_fit_extra_model (the launcher's model params as they were
//                            before the fit, the draft's context params, shares_model); the row's `fit` gets
//                            `extra`: common_get_device_memory_data of that extra at the fitted context (per device,
//                            the bytes the fitter added at that context before zeroing the shared weights); after the
//                            target's context, the draft context (common_speculative_init_result: ctx_type MTP, the
//                            target's n_ctx, ctx_other the target) is made on the loaded model: `mtp_ctx` its per-device
//                            breakdown.  type_k_draft, type_v_draft: the draft's cache types (default f16)
//   quiet=1                  do not echo llama.cpp's log to stderr
//   hold=1                   after printing the JSON line, keep the model and context allocated until a line arrives
//                            on stdin (tools/truth/gpu_check.py reads NVML's used memory meanwhile)
//   rereserve=1              diagnostic: re-run llama.cpp's dry-run sizing (graph_reserve with sizes) inside the live
//                            context (pp and tg graph); =2 also re-runs a real reserve afterwards (real allocation only)

#include <algorithm>
#include <array>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>
#include <sstream>
#include <fstream>
#include <thread>
#include <atomic>
#include <optional>
#include <variant>
#include <regex>
#include <list>

#include "ggml.h"
#include "ggml-backend.h"
#include "ggml-cpp.h"
#include "llama.h"
#include "gguf.h"
#include "fit.h"      // common/fit.h: common_fit_params (libllama-common)
#include "log.h"      // common/log.h: common_log_set_verbosity_thold
#include "mock_gpu.h"

#define private public
#define protected public
#include "llama-context.h"
#include "llama-model.h"
#include "llama-kv-cache.h"
#include "llama-kv-cache-iswa.h"
#include "llama-memory-recurrent.h"
#include "llama-memory-hybrid.h"
#include "llama-memory-hybrid-iswa.h"
#include "llama-ext.h"
#undef private
#undef protected

static std::string g_log;
static bool g_quiet = false;

static void log_cb(ggml_log_level level, const char * text, void *) {
    (void) level;
    g_log += text;
    if (!g_quiet) fputs(text, stderr);
}

struct rss_t { long rss_kb = 0, hwm_kb = 0, anon_kb = 0, file_kb = 0; };

static rss_t read_rss() {
    rss_t r;
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line)) {
        long v = 0;
        if (sscanf(line.c_str(), "VmRSS: %ld", &v) == 1) r.rss_kb = v;
        else if (sscanf(line.c_str(), "VmHWM: %ld", &v) == 1) r.hwm_kb = v;
        else if (sscanf(line.c_str(), "RssAnon: %ld", &v) == 1) r.anon_kb = v;
        else if (sscanf(line.c_str(), "RssFile: %ld", &v) == 1) r.file_kb = v;
    }
    return r;
}

static std::string rss_json(const rss_t & r) {
    char b[256];
    snprintf(b, sizeof b, "{\"rss\":%ld,\"hwm\":%ld,\"anon\":%ld,\"file\":%ld}",
             r.rss_kb * 1024, r.hwm_kb * 1024, r.anon_kb * 1024, r.file_kb * 1024);
    return b;
}

static std::string jstr(const std::string & s) {
    std::string o = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') { o += '\\'; o += c; }
        else if (c == '\n') o += "\\n";
        else if ((unsigned char) c < 0x20) { char b[8]; snprintf(b, sizeof b, "\\u%04x", c); o += b; }
        else o += c;
    }
    return o + "\"";
}

static ggml_type parse_type(const std::string & s) {
    for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
        const char * n = ggml_type_name((ggml_type) t);
        if (n && s == n) return (ggml_type) t;
    }
    fprintf(stderr, "unknown type %s\n", s.c_str());
    exit(2);
}

static std::string bufmap_json(const std::map<ggml_backend_buffer_type_t, size_t> & m) {
    std::string o = "{";
    bool first = true;
    for (auto & [buft, sz] : m) {
        if (!first) o += ",";
        first = false;
        o += jstr(ggml_backend_buft_name(buft)) + ":" + std::to_string(sz);
    }
    return o + "}";
}

static std::string kv_json(const llama_kv_cache * kv, const char * role) {
    if (!kv) return "null";
    std::string o = "{";
    o += "\"role\":" + jstr(role);
    o += ",\"cells\":" + std::to_string(kv->get_size());
    o += ",\"n_stream\":" + std::to_string(kv->get_n_stream());
    o += ",\"n_layer\":" + std::to_string(kv->layers.size());
    o += ",\"v_trans\":" + std::to_string((int) kv->v_trans);
    o += ",\"n_swa\":" + std::to_string(kv->n_swa);
    o += ",\"k_bytes\":" + std::to_string(kv->size_k_bytes());
    o += ",\"v_bytes\":" + std::to_string(kv->size_v_bytes());
    o += ",\"total_bytes\":" + std::to_string(kv->total_size());
    o += ",\"buffers\":" + bufmap_json(kv->memory_breakdown());
    // per-layer K/V tensor shapes (first layer only, to keep output short) and the layer ids
    std::string ils = "[";
    for (size_t i = 0; i < kv->layers.size(); ++i) {
        if (i) ils += ",";
        ils += std::to_string(kv->layers[i].il);
    }
    ils += "]";
    o += ",\"layers\":" + ils;
    if (!kv->layers.empty()) {
        const ggml_tensor * k = kv->layers[0].k;
        const ggml_tensor * v = kv->layers[0].v;
        char b[256];
        snprintf(b, sizeof b, ",\"k0\":{\"type\":\"%s\",\"ne\":[%" PRId64 ",%" PRId64 ",%" PRId64 "],\"nbytes\":%zu}",
                 ggml_type_name(k->type), k->ne[0], k->ne[1], k->ne[2], ggml_nbytes(k));
        o += b;
        if (v) {
            snprintf(b, sizeof b, ",\"v0\":{\"type\":\"%s\",\"ne\":[%" PRId64 ",%" PRId64 ",%" PRId64 "],\"nbytes\":%zu}",
                     ggml_type_name(v->type), v->ne[0], v->ne[1], v->ne[2], ggml_nbytes(v));
            o += b;
        }
    }
    return o + "}";
}

static std::string rs_json(const llama_memory_recurrent * rs) {
    if (!rs) return "null";
    std::string o = "{";
    o += "\"cells\":" + std::to_string(rs->size);
    size_t n_layers = 0;
    for (auto * t : rs->r_l) if (t) n_layers++;
    o += ",\"n_layer\":" + std::to_string(n_layers);
    o += ",\"r_bytes\":" + std::to_string(rs->size_r_bytes());
    o += ",\"s_bytes\":" + std::to_string(rs->size_s_bytes());
    o += ",\"p_bytes\":" + std::to_string(rs->size_p_bytes());
    o += ",\"total_bytes\":" + std::to_string(rs->total_size());
    o += ",\"buffers\":" + bufmap_json(rs->memory_breakdown());
    for (size_t i = 0; i < rs->r_l.size(); ++i) {
        if (rs->r_l[i] && rs->s_l[i]) {
            char b[256];
            snprintf(b, sizeof b, ",\"r0\":{\"il\":%zu,\"type\":\"%s\",\"ne\":[%" PRId64 ",%" PRId64 "]},\"s0\":{\"type\":\"%s\",\"ne\":[%" PRId64 ",%" PRId64 "]}",
                     i, ggml_type_name(rs->r_l[i]->type), rs->r_l[i]->ne[0], rs->r_l[i]->ne[1],
                     ggml_type_name(rs->s_l[i]->type), rs->s_l[i]->ne[0], rs->s_l[i]->ne[1]);
            o += b;
            break;
        }
    }
    return o + "}";
}


static std::vector<std::string> split_str(const std::string & s, char sep) {
    std::vector<std::string> r;
    if (s.empty()) return r;
    size_t pos = 0;
    while (true) {
        size_t e = s.find(sep, pos);
        r.push_back(s.substr(pos, e == std::string::npos ? std::string::npos : e - pos));
        if (e == std::string::npos) break;
        pos = e + 1;
    }
    return r;
}

static ggml_backend_buffer_type_t buft_by_name(const std::string & name) {
    // as common/arg.cpp parse_tensor_buffer_overrides: the default buffer type of every device
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        auto * dev = ggml_backend_dev_get(i);
        auto * buft = ggml_backend_dev_buffer_type(dev);
        if (buft && name == ggml_backend_buft_name(buft)) return buft;
    }
    // convenience: host buffer types too
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        auto * buft = ggml_backend_dev_host_buffer_type(ggml_backend_dev_get(i));
        if (buft && name == ggml_backend_buft_name(buft)) return buft;
    }
    return nullptr;
}

static std::string dev_name_or(ggml_backend_dev_t dev) {
    return dev ? ggml_backend_dev_name(dev) : "null";
}

// parse the split counts llama.cpp logs in sched_reserve (last occurrence):
//   v0.4.0: "graph splits = X"  or  "graph splits = X (with bs=N), Y (with bs=1)"
//   v0.5.0: "graph: nodes = ..., splits = X, ..."  or  "... splits = X / Y, ..."
static void parse_splits(const std::string & log, int & pp, int & tg) {
    pp = tg = -1;
    size_t p = log.rfind("graph splits = ");
    size_t q = log.rfind(", splits = ");
    if (p != std::string::npos && (q == std::string::npos || p > q)) {
        p += strlen("graph splits = ");
        int a = -1, b = -1, bs = 0;
        if (sscanf(log.c_str() + p, "%d (with bs=%d), %d", &a, &bs, &b) == 3) { pp = a; tg = b; }
        else if (sscanf(log.c_str() + p, "%d", &a) == 1) { pp = tg = a; }
    } else if (q != std::string::npos) {
        q += strlen(", splits = ");
        int a = -1, b = -1;
        if (sscanf(log.c_str() + q, "%d / %d", &a, &b) == 2) { pp = a; tg = b; }
        else if (sscanf(log.c_str() + q, "%d", &a) == 1) { pp = tg = a; }
    }
}

int main(int argc, char ** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL.gguf key=value ...\n", argv[0]);
        return 2;
    }
    std::map<std::string, std::string> kv;
    for (int i = 2; i < argc; ++i) {
        const char * eq = strchr(argv[i], '=');
        if (!eq) { fprintf(stderr, "bad arg %s\n", argv[i]); return 2; }
        kv[std::string(argv[i], eq - argv[i])] = eq + 1;
    }
    auto geti = [&](const char * k, long d) { return kv.count(k) ? atol(kv[k].c_str()) : d; };
    auto gets = [&](const char * k, const char * d) { return kv.count(k) ? kv[k] : std::string(d); };
    g_quiet = geti("quiet", 0) != 0;

    const rss_t r0 = read_rss();

    llama_log_set(log_cb, nullptr);

    // ---- mock GPUs: register before any other backend, as a GPU backend is registered before the CPU one ----
    const int n_mock = (int) geti("mock_gpus", 0);
    mock_gpu_config mcfg;
    if (n_mock > 0) {
        mcfg.n_devices = n_mock;
        mcfg.name = gets("mock_name", "MOCK");
        mcfg.description = gets("mock_desc", "Mock GPU");
        mcfg.total = mock_gpu_parse_mib_list(gets("mock_total_mib", "24576"));
        mcfg.free = kv.count("mock_free_mib") ? mock_gpu_parse_mib_list(kv["mock_free_mib"]) : mcfg.total;
        mcfg.alignment = (size_t) geti("mock_align", 128);
        const long max_mib = geti("mock_max_mib", 0);
        mcfg.max_size = max_mib > 0 ? (size_t) max_mib * 1024 * 1024 : SIZE_MAX;
        const std::string alloc = gets("mock_alloc", "plain");
        if (alloc != "plain" && alloc != "cuda") { fprintf(stderr, "mock_alloc must be plain|cuda\n"); return 2; }
        mcfg.alloc_cuda = alloc == "cuda";
        mcfg.fa_alloc_cuda = geti("mock_fa_alloc", 0) != 0;
        mcfg.caps_async = geti("mock_async", 1) != 0;
        mcfg.caps_events = geti("mock_events", 1) != 0;
        mcfg.host_buffer = geti("mock_host", 1) != 0;
        mcfg.src_check = geti("mock_src_check", 1) != 0;
        mcfg.offload_min_batch = (int) geti("mock_offload_batch", 32);
        mcfg.unsupported_ops = split_str(gets("mock_unsupported", ""), ',');
        mcfg.moe_alloc_dep = geti("mock_moe_dep", 0) != 0;
        mcfg.cpu_threads = (int) geti("threads", 2);
        mock_gpu_register(mcfg);
    }

    std::string bdir = gets("backend_dir", getenv("GGML_BACKEND_DIR") ? getenv("GGML_BACKEND_DIR") : "");
    if (!bdir.empty()) ggml_backend_load_all_from_path(bdir.c_str());
    else ggml_backend_load_all();
    llama_backend_init();

    const rss_t r1 = read_rss();

    llama_model_params mp = llama_model_default_params();
    {
        const std::string ngl = gets("ngl", n_mock > 0 ? "all" : "0");
        mp.n_gpu_layers = (ngl == "all" || ngl == "auto") ? -1 : atoi(ngl.c_str());
    }
    {
        const std::string sm = gets("split", "layer");
        if (sm == "layer") mp.split_mode = LLAMA_SPLIT_MODE_LAYER;
        else if (sm == "row") mp.split_mode = LLAMA_SPLIT_MODE_ROW;
        else if (sm == "none") mp.split_mode = LLAMA_SPLIT_MODE_NONE;
        else if (sm == "tensor") mp.split_mode = LLAMA_SPLIT_MODE_TENSOR;
        else { fprintf(stderr, "split must be layer|row|none|tensor\n"); return 2; }
    }
    mp.main_gpu = (int32_t) geti("main_gpu", 0);
    std::vector<float> tensor_split(llama_max_devices(), 0.0f);
    if (kv.count("ts")) {
        auto parts = split_str(kv["ts"], ',');
        for (size_t i = 0; i < parts.size() && i < tensor_split.size(); ++i) tensor_split[i] = strtof(parts[i].c_str(), nullptr);
        mp.tensor_split = tensor_split.data();
    }
    // tensor buffer type overrides: ot first, then n_cpu_moe / cpu_moe (as common/arg.cpp appends them in argument order)
    std::vector<llama_model_tensor_buft_override> tbo;
    static std::list<std::string> tbo_strings;
    std::string ot_json = "[";
    for (const auto & item : split_str(gets("ot", ""), ';')) {
        if (item.empty()) continue;
        const size_t pos = item.rfind('=');
        if (pos == std::string::npos) { fprintf(stderr, "bad ot item %s\n", item.c_str()); return 2; }
        const std::string pat = item.substr(0, pos), bname = item.substr(pos + 1);
        ggml_backend_buffer_type_t buft = buft_by_name(bname);
        if (!buft) { fprintf(stderr, "unknown buffer type %s\n", bname.c_str()); printf("{\"error\":\"unknown buffer type %s\"}\n", bname.c_str()); return 1; }
        tbo_strings.push_back(pat);
        tbo.push_back({ tbo_strings.back().c_str(), buft });
    }
    if (geti("cpu_moe", 0)) {
        tbo.push_back({ "\\.ffn_(up|down|gate|gate_up)_(ch|)exps", ggml_backend_cpu_buffer_type() });
    }
    for (long i = 0; i < geti("n_cpu_moe", 0); ++i) {
        tbo_strings.push_back("blk\\." + std::to_string(i) + "\\.ffn_(up|down|gate|gate_up)_(ch|)exps");
        tbo.push_back({ tbo_strings.back().c_str(), ggml_backend_cpu_buffer_type() });
    }
    for (long i = 0; i < geti("n_cpu_ffn", 0); ++i) {  // --n-cpu-ffn N (common/common.h LLM_FFN_DENSE_REGEX)
        tbo_strings.push_back("blk\\." + std::to_string(i) + "\\.ffn_(up|down|gate)\\.");
        tbo.push_back({ tbo_strings.back().c_str(), ggml_backend_cpu_buffer_type() });
    }
    for (size_t i = 0; i < tbo.size(); ++i) {
        if (i) ot_json += ",";
        ot_json += "[" + jstr(tbo[i].pattern) + "," + jstr(ggml_backend_buft_name(tbo[i].buft)) + "]";
    }
    ot_json += "]";
    const bool want_fit = geti("fit", 0) != 0;
    if (!tbo.empty() || want_fit) {
        // terminated; padded to llama_max_tensor_buft_overrides() so that the fitter can write into it (as common/arg.cpp)
        while (tbo.size() < llama_max_tensor_buft_overrides()) tbo.push_back({ nullptr, nullptr });
        mp.tensor_buft_overrides = tbo.data();
        if (tbo[0].pattern == nullptr && !want_fit) mp.tensor_buft_overrides = nullptr;
        if (tbo[0].pattern == nullptr && want_fit) mp.tensor_buft_overrides = nullptr; // "not set by user"
    }
    std::vector<ggml_backend_dev_t> devlist;
    if (kv.count("dev")) {
        if (kv["dev"] != "none") {
            for (const auto & n : split_str(kv["dev"], ',')) {
                ggml_backend_dev_t d = ggml_backend_dev_by_name(n.c_str());
                if (!d) { fprintf(stderr, "unknown device %s\n", n.c_str()); return 2; }
                devlist.push_back(d);
            }
        }
        devlist.push_back(nullptr);
        mp.devices = devlist.data();
    }
    mp.no_host = geti("no_host", 0) != 0;
    const bool mtp_ctx = geti("mtp_ctx", 0) != 0;
    mp.load_mtp = mtp_ctx || geti("mtp", 0) != 0;
    mp.use_extra_bufts = geti("repack", 1) != 0;
    mp.load_mode = geti("mmap", 0) ? LLAMA_LOAD_MODE_MMAP : LLAMA_LOAD_MODE_NONE;
    const bool meta = geti("meta", 0) != 0;
    mp.no_alloc = meta || geti("no_alloc", 0) != 0;

    llama_context_params cp = llama_context_default_params();
    cp.n_ctx     = geti("n_ctx", 2048);
    cp.n_seq_max = geti("n_seq", 1);
    cp.n_batch   = geti("n_batch", 2048);
    cp.n_ubatch  = geti("n_ubatch", 512);
    cp.n_rs_seq  = geti("n_rs_seq", 0);
    cp.n_outputs_max = geti("outputs_max", 0);  // llama-server sets its output limit (server_output_limits)
    cp.n_threads = cp.n_threads_batch = geti("threads", 2);
    cp.type_k    = parse_type(gets("type_k", "f16"));
    cp.type_v    = parse_type(gets("type_v", "f16"));
    const std::string fa = gets("fa", "auto");
    cp.flash_attn_type = fa == "on" ? LLAMA_FLASH_ATTN_TYPE_ENABLED : fa == "off" ? LLAMA_FLASH_ATTN_TYPE_DISABLED : LLAMA_FLASH_ATTN_TYPE_AUTO;
    cp.kv_unified = geti("unified", 0) != 0;
    cp.swa_full   = geti("swa_full", 0) != 0;
    cp.offload_kqv = geti("kv_offload", 1) != 0;
    cp.op_offload  = geti("op_offload", 1) != 0;
    cp.no_perf    = true;
    // the MTP draft context's parameters from the server's, as common_base_params_to_speculative and
    // common_init_result / common_speculative_init_result make them (probe.cpp's draft_params)
    const auto draft_params = [&](llama_context_params base) {
        base.ctx_type = LLAMA_CONTEXT_TYPE_MTP;
        base.n_rs_seq = 0;
        base.type_k = parse_type(gets("type_k_draft", "f16"));
        base.type_v = parse_type(gets("type_v_draft", "f16"));
        base.n_outputs_max = cp.n_seq_max;
        base.n_outputs_max_per_seq = 1;
        base.embeddings = false;
        base.pooling_type = LLAMA_POOLING_TYPE_UNSPECIFIED;
        return base;
    };

    // ---- optional: llama.cpp's fitter against the mock devices' free memory ----
    std::string fit_json = "null";
    std::vector<float> fit_ts(llama_max_devices(), 0.0f); // must outlive the model load (mp.tensor_split points here)
    if (want_fit) {
        std::vector<size_t> margins(llama_max_devices(), (size_t) 1024 * 1024 * 1024);
        {
            auto m = mock_gpu_parse_mib_list(gets("fit_margin_mib", "1024"));
            for (size_t i = 0; i < margins.size(); ++i) if (!m.empty()) margins[i] = i < m.size() ? m[i] : m.back();
        }
        if (mp.tensor_split) std::copy(mp.tensor_split, mp.tensor_split + llama_max_devices(), fit_ts.begin());
        const uint32_t n_ctx_min = (uint32_t) geti("fit_min_ctx", 4096);
        const int ngl_before = mp.n_gpu_layers;
        const uint32_t n_ctx_before = cp.n_ctx;
        if (geti("fit_verbose", 0)) common_log_set_verbosity_thold(LOG_LEVEL_TRACE);
        llama_model_params mp_fit = mp;
        mp_fit.no_alloc = false; // the fitter sets no_alloc itself for its measurements
        // common_init_result under draft-mtp: the extra's model params are the launcher's (a copy of params, so
        // neither -ts nor the overrides the fitter writes reach them), its context params the draft's
        llama_model_params mp_extra = mp_fit;
        llama_context_params cp_extra = draft_params(cp);
        const common_fit_extra_model extra = { argv[1], &mp_extra, &cp_extra, /*shares_model*/ true };
        const int64_t t0 = llama_time_us();
        const common_params_fit_status st = common_fit_params(argv[1], &mp_fit, &cp, fit_ts.data(), tbo.data(),
            margins.data(), n_ctx_min, mtp_ctx ? &extra : nullptr, GGML_LOG_LEVEL_ERROR);
        const int64_t t1 = llama_time_us();
        std::string extra_json;
        if (mtp_ctx) {
            // what add_extra_memory measured at the context the fitter settled on (model bytes before shares_model
            // zeroes them), per device of the extra's own layout, the host last
            cp_extra.n_ctx = cp.n_ctx;
            std::vector<ggml_backend_dev_t> devs_extra;
            uint32_t ngl_e = 0, nct_e = 0, nex_e = 0;
            const auto md = common_get_device_memory_data(argv[1], &mp_extra, &cp_extra, devs_extra, ngl_e, nct_e, nex_e,
                                                          GGML_LOG_LEVEL_ERROR);
            extra_json = ",\"extra\":{\"n_ctx\":" + std::to_string(cp_extra.n_ctx) + ",\"hp_ngl\":" + std::to_string(ngl_e);
            for (size_t i = 0; i < md.size(); ++i) {
                const std::string name = i < devs_extra.size() ? ggml_backend_dev_name(devs_extra[i]) : "Host";
                extra_json += "," + jstr(name) + ":{\"model\":" + std::to_string(md[i].model) + ",\"context\":" +
                              std::to_string(md[i].context) + ",\"compute\":" + std::to_string(md[i].compute) + "}";
            }
            extra_json += "}";
        }
        mp.n_gpu_layers = mp_fit.n_gpu_layers;
        mp.tensor_split = mp_fit.tensor_split;
        mp.tensor_buft_overrides = mp_fit.tensor_buft_overrides;
        std::string o = "{\"status\":" + std::to_string((int) st) +
            ",\"status_name\":" + jstr(st == COMMON_PARAMS_FIT_STATUS_SUCCESS ? "success" : st == COMMON_PARAMS_FIT_STATUS_FAILURE ? "failure" : "error") +
            ",\"seconds\":" + std::to_string((t1 - t0) * 1e-6) +
            ",\"n_gpu_layers_before\":" + std::to_string(ngl_before) +
            ",\"n_gpu_layers\":" + std::to_string(mp.n_gpu_layers) +
            ",\"n_ctx_before\":" + std::to_string(n_ctx_before) +
            ",\"n_ctx\":" + std::to_string(cp.n_ctx) + ",\"tensor_split\":[";
        const size_t n_gpu_devs = n_mock > 0 ? (size_t) n_mock : 0;
        for (size_t i = 0; i < std::max<size_t>(n_gpu_devs, 1); ++i) {
            if (i) o += ",";
            o += std::to_string(mp.tensor_split ? mp.tensor_split[i] : 0.0f);
        }
        o += "],\"overrides\":[";
        size_t n_ov = 0;
        if (mp.tensor_buft_overrides) {
            for (const auto * ov = mp.tensor_buft_overrides; ov->pattern; ++ov) {
                if (n_ov++) o += ",";
                o += "[" + jstr(ov->pattern) + "," + jstr(ov->buft ? ggml_backend_buft_name(ov->buft) : "null") + "]";
            }
        }
        o += "],\"margins_mib\":[";
        for (size_t i = 0; i < std::max<size_t>(n_gpu_devs, 1); ++i) { if (i) o += ","; o += std::to_string(margins[i] / (1024 * 1024)); }
        o += "],\"n_ctx_min\":" + std::to_string(n_ctx_min) + extra_json + "}";
        fit_json = o;
        if (!mp.tensor_buft_overrides || !mp.tensor_buft_overrides->pattern) {
            // keep it non-null only if it holds something
            if (mp.tensor_buft_overrides && !mp.tensor_buft_overrides->pattern) mp.tensor_buft_overrides = nullptr;
        }
        ot_json = "[";
        if (mp.tensor_buft_overrides) {
            size_t k = 0;
            for (const auto * ov = mp.tensor_buft_overrides; ov->pattern; ++ov) {
                if (k++) ot_json += ",";
                ot_json += "[" + jstr(ov->pattern) + "," + jstr(ggml_backend_buft_name(ov->buft)) + "]";
            }
        }
        ot_json += "]";
        g_log.clear();
    }

    llama_model * model = nullptr;
    if (meta) {
        ggml_context * meta_ctx = nullptr;
        gguf_init_params gp = { /*no_alloc =*/ true, /*ctx =*/ &meta_ctx };
        gguf_context * g = gguf_init_from_file(argv[1], gp);
        if (!g) { printf("{\"error\":\"gguf_init_from_file failed\"}\n"); return 1; }
        model = llama_model_init_from_user(g, [](ggml_tensor *, void *) {}, nullptr, mp);
    } else {
        model = llama_model_load_from_file(argv[1], mp);
    }
    if (!model) {
        fprintf(stderr, "model load failed\n");
        std::string err = "model load failed";
        size_t p = g_log.rfind("llama_model_load: error loading model: ");
        if (p != std::string::npos) { size_t e = g_log.find('\n', p); err = g_log.substr(p, e == std::string::npos ? std::string::npos : e - p); }
        printf("{\"error\":%s,\"fit\":%s}\n", jstr(err).c_str(), fit_json.c_str());
        return 1;
    }

    const rss_t r2 = read_rss();

    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        fprintf(stderr, "context init failed\n");
        printf("{\"error\":\"context init failed\",\"fit\":%s}\n", fit_json.c_str());
        return 1;
    }

    const rss_t r3 = read_rss();

    // ---- gather sizes (old mem_probe fields first, unchanged) ----
    std::string o = "{";
    o += "\"llama_cpp\":" + jstr(gets("tag", "")) ;
    o += ",\"system_info\":" + jstr(llama_print_system_info());
    char desc[256]; llama_model_desc(model, desc, sizeof desc);
    o += ",\"model_desc\":" + jstr(desc);
    o += ",\"n_params\":" + std::to_string(llama_model_n_params(model));
    o += ",\"model_size_bytes\":" + std::to_string(llama_model_size(model));
    o += ",\"model_buffers\":" + bufmap_json(model->memory_breakdown());

    const auto & cparams = ctx->cparams;
    o += ",\"cparams\":{\"n_ctx\":" + std::to_string(cparams.n_ctx) +
         ",\"n_ctx_seq\":" + std::to_string(cparams.n_ctx_seq) +
         ",\"n_seq_max\":" + std::to_string(cparams.n_seq_max) +
         ",\"n_batch\":" + std::to_string(cparams.n_batch) +
         ",\"n_ubatch\":" + std::to_string(cparams.n_ubatch) +
         ",\"n_outputs_max\":" + std::to_string(cparams.n_outputs_max) +
         ",\"flash_attn\":" + std::to_string((int) cparams.flash_attn) +
         ",\"kv_unified\":" + std::to_string((int) cparams.kv_unified) + "}";

    llama_memory_i * mem = ctx->memory.get();
    std::string kvs = "[", rs = "null", mem_kind = "none";
    if (mem) {
        if (auto * p = dynamic_cast<llama_kv_cache_iswa *>(mem)) {
            mem_kind = "kv_iswa";
            kvs += kv_json(p->get_base(), "base") + "," + kv_json(p->get_swa(), "swa");
        } else if (auto * p = dynamic_cast<llama_memory_hybrid_iswa *>(mem)) {
            mem_kind = "hybrid_iswa";
            kvs += kv_json(p->get_mem_attn()->get_base(), "base") + "," + kv_json(p->get_mem_attn()->get_swa(), "swa");
            rs = rs_json(p->get_mem_recr());
        } else if (auto * p = dynamic_cast<llama_memory_hybrid *>(mem)) {
            mem_kind = "hybrid";
            kvs += kv_json(p->get_mem_attn(), "attn");
            rs = rs_json(p->get_mem_recr());
        } else if (auto * p = dynamic_cast<llama_memory_recurrent *>(mem)) {
            mem_kind = "recurrent";
            rs = rs_json(p);
        } else if (auto * p = dynamic_cast<llama_kv_cache *>(mem)) {
            mem_kind = "kv";
            kvs += kv_json(p, "attn");
        } else {
            mem_kind = "other";
        }
        o += ",\"memory_buffers\":" + bufmap_json(mem->memory_breakdown());
    }
    kvs += "]";
    o += ",\"memory_kind\":" + jstr(mem_kind) + ",\"kv_caches\":" + kvs + ",\"recurrent\":" + rs;

    auto bd_json = [&]() {
        std::string s = "{";
        bool first = true;
        for (auto & [buft, d] : llama_get_memory_breakdown(ctx)) {
            if (!first) s += ",";
            first = false;
            s += jstr(ggml_backend_buft_name(buft)) + ":{\"model\":" + std::to_string(d.model) +
                 ",\"context\":" + std::to_string(d.context) + ",\"compute\":" + std::to_string(d.compute) + "}";
        }
        return s + "}";
    };
    o += ",\"breakdown\":" + bd_json();
    o += ",\"output_buffer_bytes\":" + std::to_string(ctx->buf_output ? ggml_backend_buffer_get_size(ctx->buf_output.get()) : 0);
    o += ",\"output_buffer_type\":" + jstr(ctx->buf_output ? ggml_backend_buffer_name(ctx->buf_output.get()) : "");

    o += ",\"rss_start\":" + rss_json(r0) + ",\"rss_after_backend\":" + rss_json(r1) +
         ",\"rss_after_model\":" + rss_json(r2) + ",\"rss_after_ctx\":" + rss_json(r3);

    o += ",\"no_alloc\":" + std::to_string((int) mp.no_alloc) + ",\"meta\":" + std::to_string((int) meta);

    // ---- new: placement across devices ----
    {
        std::string m = "{\"n\":" + std::to_string(n_mock);
        if (n_mock > 0) {
            m += ",\"name\":" + jstr(mcfg.name) + ",\"total\":[";
            auto devs = mock_gpu_devices();
            for (size_t i = 0; i < devs.size(); ++i) { size_t f, t; ggml_backend_dev_memory(devs[i], &f, &t); m += (i ? "," : "") + std::to_string(t); }
            m += "],\"free\":[";
            for (size_t i = 0; i < devs.size(); ++i) { size_t f, t; ggml_backend_dev_memory(devs[i], &f, &t); m += (i ? "," : "") + std::to_string(f); }
            m += "],\"align\":" + std::to_string(mcfg.alignment) + ",\"max_size\":" + std::to_string(mcfg.max_size == SIZE_MAX ? 0 : mcfg.max_size) +
                 ",\"alloc\":" + jstr(mcfg.alloc_cuda ? "cuda" : "plain") + ",\"fa_alloc\":" + std::to_string((int) mcfg.fa_alloc_cuda) +
                 ",\"async\":" + std::to_string((int) mcfg.caps_async) + ",\"events\":" + std::to_string((int) mcfg.caps_events) +
                 ",\"host\":" + std::to_string((int) mcfg.host_buffer) + ",\"offload_batch\":" + std::to_string(mcfg.offload_min_batch) +
                 ",\"moe_dep\":" + std::to_string((int) mcfg.moe_alloc_dep) +
                 ",\"unsupported\":" + jstr(gets("mock_unsupported", ""));
        }
        o += ",\"mock\":" + m + "}";
    }
    o += ",\"settings\":{\"ngl\":" + std::to_string(mp.n_gpu_layers) + ",\"n_gpu_layers_eff\":" + std::to_string(model->n_gpu_layers()) +
         ",\"split\":" + jstr(gets("split", "layer")) + ",\"main_gpu\":" + std::to_string(mp.main_gpu) +
         ",\"ts\":" + jstr(gets("ts", "")) + ",\"overrides\":" + ot_json +
         ",\"kv_offload\":" + std::to_string((int) cp.offload_kqv) + ",\"op_offload\":" + std::to_string((int) cp.op_offload) +
         ",\"no_host\":" + std::to_string((int) mp.no_host) + ",\"repack\":" + std::to_string((int) mp.use_extra_bufts) + "}";
    o += ",\"fit\":" + fit_json;

    const int n_model_dev = llama_model_n_devices(model);
    {
        std::string d = "[";
        for (int i = 0; i < n_model_dev; ++i) d += (i ? "," : "") + jstr(ggml_backend_dev_name(llama_model_get_device(model, i)));
        o += ",\"model_devices\":" + d + "]";
    }
    const int n_layer_all = (int) model->hparams.n_layer_all;
    {
        std::string d = "[";
        for (int il = 0; il < n_layer_all; ++il) d += (il ? "," : "") + jstr(dev_name_or(model->dev_layer(il)));
        o += ",\"n_layer\":" + std::to_string(n_layer_all) + ",\"layer_dev\":" + d + "]";
        o += ",\"output_dev\":" + jstr(dev_name_or(model->dev_output()));
    }
    // where each weight went: per buffer type (count, bytes as allocated there), per layer (tensors per buffer type),
    // the tensors outside the layers (a duplicated one, the tied output or rope_freqs, once per buffer type it is in)
    {
        std::map<std::string, std::pair<size_t, size_t>> per_buft;
        std::vector<std::map<std::string, int>> per_layer(n_layer_all);
        std::map<std::string, std::vector<std::string>> io_map;
        for (const auto & [name, t] : model->tensors_by_name) {
            ggml_backend_buffer_type_t buft = t->buffer ? ggml_backend_buffer_get_type(t->buffer) : nullptr;
            const std::string bn = buft ? ggml_backend_buft_name(buft) : "none";
            auto & e = per_buft[bn];
            e.first++;
            e.second += buft ? ggml_backend_buft_get_alloc_size(buft, t) : ggml_nbytes(t);
            int il = -1;
            if (sscanf(name.c_str(), "blk.%d.", &il) == 1 && il >= 0 && il < n_layer_all) {
                per_layer[il][bn]++;
            } else {
                io_map[name].push_back(bn);
            }
        }
        std::string s = "{";
        bool first = true;
        for (auto & [bn, e] : per_buft) {
            s += (first ? "" : ",") + jstr(bn) + ":{\"n\":" + std::to_string(e.first) + ",\"bytes\":" + std::to_string(e.second) + "}";
            first = false;
        }
        o += ",\"tensor_bufts\":" + s + "}";
        std::string l = "[";
        for (int il = 0; il < n_layer_all; ++il) {
            std::string j = "{";
            for (auto & [b, n] : per_layer[il]) j += (j.size() > 1 ? "," : "") + jstr(b) + ":" + std::to_string(n);
            l += (il ? "," : "") + j + "}";
        }
        o += ",\"layer_bufts\":" + l + "]";
        std::string io = "{";
        for (auto & [name, bufts] : io_map) {
            std::sort(bufts.begin(), bufts.end());
            std::string j;
            for (auto & b : bufts) j += (j.empty() ? "" : "+") + b;
            io += (io.size() > 1 ? "," : "") + jstr(name) + ":" + jstr(j);
        }
        o += ",\"io_tensors\":" + io + "}";
    }
    // per device, aggregated the way common_fit_params / common_memory_breakdown_print do it
    {
        std::vector<llama_memory_breakdown_data> mb_dev(n_model_dev);
        llama_memory_breakdown_data mb_host;
        std::map<std::string, llama_memory_breakdown_data> mb_other;
        for (const auto & [buft, mb] : llama_get_memory_breakdown(ctx)) {
            if (ggml_backend_buft_is_host(buft)) {
                mb_host.model += mb.model; mb_host.context += mb.context; mb_host.compute += mb.compute;
                continue;
            }
            ggml_backend_dev_t dev = ggml_backend_buft_get_device(buft);
            int idx = -1;
            for (int i = 0; i < n_model_dev; ++i) if (dev && dev == llama_model_get_device(model, i)) idx = i;
            if (idx >= 0) {
                mb_dev[idx].model += mb.model; mb_dev[idx].context += mb.context; mb_dev[idx].compute += mb.compute;
            } else {
                auto & x = mb_other[ggml_backend_buft_name(buft)];
                x.model += mb.model; x.context += mb.context; x.compute += mb.compute;
            }
        }
        auto one = [](const llama_memory_breakdown_data & d) {
            return "{\"model\":" + std::to_string(d.model) + ",\"context\":" + std::to_string(d.context) +
                   ",\"compute\":" + std::to_string(d.compute) + ",\"total\":" + std::to_string(d.total());
        };
        std::string s = "{";
        for (int i = 0; i < n_model_dev; ++i) {
            ggml_backend_dev_t dev = llama_model_get_device(model, i);
            size_t f = 0, t = 0;
            ggml_backend_dev_memory(dev, &f, &t);
            s += jstr(ggml_backend_dev_name(dev)) + ":" + one(mb_dev[i]) + ",\"free\":" + std::to_string(f) + ",\"dev_total\":" + std::to_string(t) +
                 ",\"projected_free\":" + std::to_string((int64_t) f - (int64_t) mb_dev[i].total()) + "},";
        }
        s += "\"Host\":" + one(mb_host) + "}";
        for (auto & [n, d] : mb_other) s += "," + jstr(n) + ":" + one(d) + "}";
        o += ",\"per_device\":" + s + "}";
    }
    // llama-server's MTP draft context on the loaded model (common_speculative_init_result), its bytes per device
    llama_context * ctx_dft = nullptr;
    if (mtp_ctx) {
        llama_context_params dp = draft_params(cp);
        dp.n_ctx = llama_n_ctx(ctx);
        dp.ctx_other = ctx;
        ctx_dft = llama_init_from_model(model, dp);
        std::string s = "{";
        if (!ctx_dft) {
            s += "\"error\":\"draft context init failed\"";
        } else {
            std::vector<llama_memory_breakdown_data> d(n_model_dev + 1);
            for (const auto & [buft, mb] : llama_get_memory_breakdown(ctx_dft)) {
                size_t idx = n_model_dev;
                ggml_backend_dev_t dev = ggml_backend_buft_is_host(buft) ? nullptr : ggml_backend_buft_get_device(buft);
                for (int i = 0; i < n_model_dev; ++i) if (dev && dev == llama_model_get_device(model, i)) idx = i;
                d[idx].model += mb.model; d[idx].context += mb.context; d[idx].compute += mb.compute;
            }
            s += "\"n_ctx\":" + std::to_string(ctx_dft->cparams.n_ctx) + ",\"per_device\":{";
            for (int i = 0; i <= n_model_dev; ++i) {
                s += (i ? "," : "") + jstr(i < n_model_dev ? ggml_backend_dev_name(llama_model_get_device(model, i)) : "Host") +
                     ":{\"model\":" + std::to_string(d[i].model) + ",\"context\":" + std::to_string(d[i].context) +
                     ",\"compute\":" + std::to_string(d[i].compute) + "}";
            }
            s += "}";
        }
        o += ",\"mtp_ctx\":" + s + "}";
    }
    // compute buffer per scheduler backend, graph splits, copies, pipeline parallelism
    {
        std::string s = "[";
        for (size_t i = 0; i < ctx->backends.size(); ++i) {
            ggml_backend_t be = ctx->backends[i].get();
            ggml_backend_buffer_type_t buft = ggml_backend_sched_get_buffer_type(ctx->sched.get(), be);
            const size_t sz = mp.no_alloc ? ctx->backend_buf_exp_size[i] : ggml_backend_sched_get_buffer_size(ctx->sched.get(), be);
            s += (i ? "," : "") + std::string("{\"backend\":") + jstr(ggml_backend_name(be)) + ",\"buft\":" + jstr(ggml_backend_buft_name(buft)) +
                 ",\"bytes\":" + std::to_string(sz) + "}";
        }
        o += ",\"compute_by_backend\":" + s + "]";
        int pp = -1, tg = -1;
        parse_splits(g_log, pp, tg);
        o += ",\"n_splits_pp\":" + std::to_string(pp) + ",\"n_splits_tg\":" + std::to_string(tg) +
             ",\"n_splits_sched\":" + std::to_string(ggml_backend_sched_get_n_splits(ctx->sched.get())) +
             ",\"n_copies\":" + std::to_string(ggml_backend_sched_get_n_copies(ctx->sched.get())) +
             ",\"pipeline_parallel\":" + std::to_string((int) cparams.pipeline_parallel) +
             ",\"offload_kqv\":" + std::to_string((int) cparams.offload_kqv);
    }

    const long n_dec = mp.no_alloc ? 0 : geti("decode", 0);
    if (n_dec > 0) {
        const llama_vocab * vocab = llama_model_get_vocab(model);
        const int n_vocab = llama_vocab_n_tokens(vocab);
        const int n = (int) std::min<long>(n_dec, cparams.n_batch);
        llama_batch b = llama_batch_init(n, 0, 1);
        for (int i = 0; i < n; ++i) {
            b.token[i] = 300 + (i * 7) % (n_vocab - 300);
            b.pos[i] = i;
            b.n_seq_id[i] = 1;
            b.seq_id[i][0] = 0;
            b.logits[i] = i == n - 1;
        }
        b.n_tokens = n;
        const int rc = llama_decode(ctx, b);
        llama_batch_free(b);
        const rss_t r4 = read_rss();
        o += ",\"decode_tokens\":" + std::to_string(n) + ",\"decode_rc\":" + std::to_string(rc);
        o += ",\"rss_after_decode\":" + rss_json(r4);
        o += ",\"breakdown_after_decode\":" + bd_json();
        if (rc == 0) {
            const float * logits = llama_get_logits_ith(ctx, -1);
            double s = 0; for (int i = 0; i < n_vocab; ++i) s += logits[i];
            char buf[64]; snprintf(buf, sizeof buf, "%.6g", s);
            o += ",\"logits_sum\":" + std::string(buf);
        }
    }
    if (geti("rereserve", 0) && ctx->memory) {
        // diagnostic: re-run llama.cpp's dry-run sizing (graph_reserve with sizes, as sched_reserve does when
        // no_alloc) on this live context, for the pp and the tg graph, to compare with the allocated sizes
        auto mctx = ctx->memory->init_full();
        const uint32_t n_seqs = cparams.n_seq_max, n_tokens = std::min(cparams.n_ctx, cparams.n_ubatch);
        const uint32_t n_out_pp = std::min(n_tokens, cparams.n_outputs_max);
        std::string s = "{";
        for (int pass = 0; pass < 2; ++pass) {
            std::vector<size_t> sizes(ctx->backends.size(), 0);
            if (pass == 0) ctx->graph_reserve(n_tokens, n_seqs, n_out_pp, mctx.get(), true, sizes.data());
            else           ctx->graph_reserve(n_seqs, n_seqs, n_seqs, mctx.get(), true, sizes.data());
            s += std::string(pass ? ",\"tg\":[" : "\"pp\":[");
            for (size_t i = 0; i < sizes.size(); ++i) s += (i ? "," : "") + std::to_string(sizes[i]);
            s += "]";
        }
        if (!mp.no_alloc && geti("rereserve", 0) > 1) {
            ctx->graph_reserve(n_tokens, n_seqs, n_out_pp, mctx.get(), false, nullptr); // a real reserve again
            s += ",\"real_after\":[";
            for (size_t i = 0; i < ctx->backends.size(); ++i) s += (i ? "," : "") + std::to_string(ggml_backend_sched_get_buffer_size(ctx->sched.get(), ctx->backends[i].get()));
            s += "]";
        }
        o += ",\"rereserve\":" + s + "}";
    }
    if (n_mock > 0) {
        auto a = mock_gpu_allocated_bytes();
        std::string s = "[";
        for (size_t i = 0; i < a.size(); ++i) s += (i ? "," : "") + std::to_string(a[i]);
        o += ",\"mock_allocated\":" + s + "]";
    }
    o += "}";

    printf("%s\n", o.c_str());
    fflush(stdout);
    if (geti("hold", 0)) {
        char line[16];
        if (!fgets(line, sizeof line, stdin)) { /* stdin closed: release as well */ }
    }

    if (ctx_dft) llama_free(ctx_dft);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
