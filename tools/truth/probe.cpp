// memfit's truth probe: loads a GGUF with a prebuilt libllama and prints one JSON line of the bytes llama.cpp
// allocated, read from llama.cpp's own objects (weights per buffer type, each KV cache's K and V, the recurrent
// state, the scheduler's compute buffers, the output buffer) and the process RSS after each step.
// tools/truth/build.sh compiles it against the headers of the llama.cpp commit the library was built from; the
// sizes of a few private members are read by opening the classes' access (no llama.cpp code is changed).
//
//   probe MODEL.gguf [key=value ...]
//   n_ctx n_seq n_batch n_ubatch n_rs_seq threads type_k type_v fa=on|off|auto unified swa_full mmap
//   no_alloc=1 (llama.cpp's dry run)  decode=N (tokens decoded after init)  backend_dir=DIR (the CPU variant)
//   graph=1 (no decode: the reserved prompt graph's nodes allocated in the compute buffer, node by node)
//   state_tokens=T (after init, T tokens decoded into sequence state_seq (default 0), n_batch at a time; then
//   llama_state_seq_get_size, a prompt-cache entry, and llama_state_seq_get_size_ext(PARTIAL_ONLY), a checkpoint)
//   fit_used=B (common_fit_params as llama-server's --fit calls it, n_ctx 0, the other settings as above, with the
//   margin that leaves the host B bytes to use: the context it chooses, its status and the host's total memory;
//   with mtp_ctx=1 fitting the MTP draft context beside the model, as common_init_result does)
//   mtp=1 (llama-server's target under --spec-type draft-mtp: the model loaded with load_mtp, as common.cpp sets it,
//   and after init llama_set_embeddings_nextn(ctx, true, unmasked), as common_speculative_impl_draft_mtp does; the
//   output buffer is read again after the decode, the first output_reserve that sees it)
//   mtp_ctx=1 (mtp=1 and llama-server's MTP draft context beside the target, as common_speculative_init_result makes
//   it from common_base_params_to_speculative's parameters: its memory module, compute and output buffers under
//   "mtp_ctx"; with decode=N, after the target's decode, a draft step: each sequence one token and its hidden state,
//   with logits, the buffers read again)  type_k_draft, type_v_draft (--cache-type-k-draft/-v-draft; default f16)
//   draft_sampling=0 (the draft's sampling not offloaded to the backend; default 1, llama-server's draft
//   backend_sampling: each sequence's top-k sampler chain set on the draft context)
//   verify=D (the decode is llama-server's verification batch: each of the n_seq sequences its sampled token and D
//   draft tokens, every one with logits, at most n_batch tokens in all, as handle_last_sampled_token adds them; the
//   output buffer is read again after the decode, whose output_reserve(n_outputs_all) grows it)
//   outputs_max=N (llama_context_params.n_outputs_max, as llama-server's server_output_limits sets it before the
//   context is made: min(n_batch, n_parallel x (1 + n_draft)); llama_context::sched_reserve reserves the prompt
//   graph with min(n_tokens, N) outputs; 0 or unset: n_batch, a plain context's)
//   embeddings=1 (llama_context_params.embeddings, as common_context_params_to_llama sets it from llama-server's
//   --embedding/--rerank: every token of a decode an output, the output buffer n_vocab + n_embd_out floats a row;
//   the output buffer is read again after the decode)  pooling=none|mean|cls|last|rank (pooling_type, as --pooling
//   sets it; unset: the model's own)
//   warmup=1 (the decode is common_init_from_params' warmup: the vocabulary's BOS and EOS, whichever it has, else
//   token 0, at most n_batch of them, as llama_batch_get_one passes them; the output buffer read again after it)

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "llama.h"
#include "fit.h"
#include "llama-ext.h"

#define private public
#define protected public
#include "llama-context.h"
#include "llama-kv-cache-iswa.h"
#include "llama-kv-cache.h"
#include "llama-memory-hybrid-iswa.h"
#include "llama-memory-hybrid.h"
#include "llama-memory-recurrent.h"
#include "llama-model.h"
#undef private
#undef protected

namespace {

// A JSON object written field by field, in insertion order.
struct Obj {
    std::string s;
    Obj & raw(const char * key, const std::string & value) {
        s += s.empty() ? "{" : ",";
        s += quote(key) + ":" + value;
        return *this;
    }
    Obj & num(const char * key, long long v) { return raw(key, std::to_string(v)); }
    Obj & str(const char * key, const std::string & v) { return raw(key, quote(v)); }
    std::string done() const { return s.empty() ? "{}" : s + "}"; }

    static std::string quote(const std::string & v) {
        std::string o = "\"";
        for (unsigned char c : v) {
            if (c == '"' || c == '\\') {
                o += '\\';
                o += (char) c;
            } else if (c < 0x20) {
                char b[8];
                snprintf(b, sizeof b, "\\u%04x", c);
                o += b;
            } else {
                o += (char) c;
            }
        }
        return o + "\"";
    }
};

std::string rss() {
    std::map<std::string, long long> kb;
    std::ifstream f("/proc/self/status");
    for (std::string line; std::getline(f, line);) {
        const auto colon = line.find(':');
        if (colon != std::string::npos) kb[line.substr(0, colon)] = atoll(line.c_str() + colon + 1);
    }
    return Obj()
        .num("rss", kb["VmRSS"] * 1024)
        .num("hwm", kb["VmHWM"] * 1024)
        .num("anon", kb["RssAnon"] * 1024)
        .num("file", kb["RssFile"] * 1024)
        .done();
}

std::string per_buffer_type(const std::map<ggml_backend_buffer_type_t, size_t> & sizes) {
    Obj o;
    for (const auto & [buft, size] : sizes) o.num(ggml_backend_buft_name(buft), (long long) size);
    return o.done();
}

std::string tensor(const ggml_tensor * t) {
    std::string ne = "[";
    for (int i = 0; i < 3; ++i) ne += (i ? "," : "") + std::to_string(t->ne[i]);
    return Obj().str("type", ggml_type_name(t->type)).raw("ne", ne + "]").num("nbytes", (long long) ggml_nbytes(t)).done();
}

std::string kv_cache(const llama_kv_cache * kv, const char * role) {
    if (!kv) return "null";
    std::string layers = "[";
    for (size_t i = 0; i < kv->layers.size(); ++i) layers += (i ? "," : "") + std::to_string(kv->layers[i].il);
    Obj o;
    o.str("role", role)
        .num("cells", kv->get_size())
        .num("n_stream", kv->get_n_stream())
        .num("n_layer", (long long) kv->layers.size())
        .num("v_trans", kv->v_trans)
        .num("n_swa", kv->n_swa)
        .num("k_bytes", (long long) kv->size_k_bytes())
        .num("v_bytes", (long long) kv->size_v_bytes())
        .num("total_bytes", (long long) kv->total_size())
        .raw("buffers", per_buffer_type(kv->memory_breakdown()))
        .raw("layers", layers + "]");
    if (!kv->layers.empty()) {
        o.raw("k0", tensor(kv->layers[0].k));
        if (kv->layers[0].v) o.raw("v0", tensor(kv->layers[0].v));
    }
    return o.done();
}

std::string recurrent(const llama_memory_recurrent * rs) {
    if (!rs) return "null";
    long long n_layer = 0;
    for (const ggml_tensor * r : rs->r_l) n_layer += r != nullptr;
    Obj o;
    o.num("cells", rs->size)
        .num("n_layer", n_layer)
        .num("r_bytes", (long long) rs->size_r_bytes())
        .num("s_bytes", (long long) rs->size_s_bytes())
        .num("p_bytes", (long long) rs->size_p_bytes())
        .num("total_bytes", (long long) rs->total_size())
        .raw("buffers", per_buffer_type(rs->memory_breakdown()));
    for (size_t il = 0; il < rs->r_l.size(); ++il) {
        const ggml_tensor * r = rs->r_l[il];
        const ggml_tensor * s = rs->s_l[il];
        if (!r || !s) continue;
        const std::string r_ne = "[" + std::to_string(r->ne[0]) + "," + std::to_string(r->ne[1]) + "]";
        const std::string s_ne = "[" + std::to_string(s->ne[0]) + "," + std::to_string(s->ne[1]) + "]";
        o.raw("r0", Obj().num("il", (long long) il).str("type", ggml_type_name(r->type)).raw("ne", r_ne).done());
        o.raw("s0", Obj().str("type", ggml_type_name(s->type)).raw("ne", s_ne).done());
        break;
    }
    return o.done();
}

std::string breakdown(const llama_context * ctx) {
    Obj o;
    for (const auto & [buft, d] : llama_get_memory_breakdown(ctx)) {
        o.raw(ggml_backend_buft_name(buft),
              Obj().num("model", (long long) d.model).num("context", (long long) d.context).num("compute", (long long) d.compute).done());
    }
    return o.done();
}

// The memory module's caches, by the kind llama.cpp built for the architecture (most derived first).
void add_memory(Obj & out, llama_context * ctx) {
    std::vector<std::string> caches;
    std::string state = "null", kind = "none";
    if (llama_memory_i * mem = ctx->memory.get()) {
        if (auto * m = dynamic_cast<llama_kv_cache_iswa *>(mem)) {
            kind = "kv_iswa";
            caches = {kv_cache(m->get_base(), "base"), kv_cache(m->get_swa(), "swa")};
        } else if (auto * m = dynamic_cast<llama_memory_hybrid_iswa *>(mem)) {
            kind = "hybrid_iswa";
            caches = {kv_cache(m->get_mem_attn()->get_base(), "base"), kv_cache(m->get_mem_attn()->get_swa(), "swa")};
            state = recurrent(m->get_mem_recr());
        } else if (auto * m = dynamic_cast<llama_memory_hybrid *>(mem)) {
            kind = "hybrid";
            caches = {kv_cache(m->get_mem_attn(), "attn")};
            state = recurrent(m->get_mem_recr());
        } else if (auto * m = dynamic_cast<llama_memory_recurrent *>(mem)) {
            kind = "recurrent";
            state = recurrent(m);
        } else if (auto * m = dynamic_cast<llama_kv_cache *>(mem)) {
            kind = "kv";
            caches = {kv_cache(m, "attn")};
        } else {
            kind = "other";
        }
        out.raw("memory_buffers", per_buffer_type(mem->memory_breakdown()));
    }
    std::string list = "[";
    for (size_t i = 0; i < caches.size(); ++i) list += (i ? "," : "") + caches[i];
    out.str("memory_kind", kind).raw("kv_caches", list + "]").raw("recurrent", state);
}

long long output_bytes(const llama_context * ctx) {
    const ggml_backend_buffer_t output = ctx->buf_output.get();
    return output ? (long long) ggml_backend_buffer_get_size(output) : 0;
}

// The graph llama_context::sched_reserve reserved last (the worst-case prompt ubatch), allocated in the compute
// buffer: per node its op, type, shape, the node it views, and its offset in the buffer (-1: not in it).
std::string graph_nodes(llama_context * ctx) {
    ggml_cgraph * gf = ctx->gf_res_reserve->get_gf();
    ggml_backend_sched_t sched = ctx->sched.get();
    if (!gf || !ggml_backend_sched_alloc_graph(sched, gf)) return "null";
    std::map<const ggml_tensor *, int> index;
    std::string o = "[";
    for (int i = 0; i < ggml_graph_n_nodes(gf); ++i) {
        const ggml_tensor * t = ggml_graph_node(gf, i);
        index[t] = i;
        std::string ne = "[";
        for (int d = 0; d < GGML_MAX_DIMS; ++d) ne += (d ? "," : "") + std::to_string(t->ne[d]);
        long long offset = -1;
        if (t->buffer && t->data && !t->view_src) {
            offset = (long long) ((const char *) t->data - (const char *) ggml_backend_buffer_get_base(t->buffer));
        }
        Obj n;
        n.str("op", ggml_op_desc(t)).str("type", ggml_type_name(t->type)).raw("ne", ne + "]").num("nbytes", (long long) ggml_nbytes(t));
        if (t->view_src) n.num("view_of", index.count(t->view_src) ? index[t->view_src] : -1).num("view_offs", (long long) t->view_offs);
        n.num("offset", offset);
        o += (i ? "," : "") + n.done();
    }
    return o + "]";
}

ggml_type type_named(const std::string & name) {
    for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
        const char * n = ggml_type_name((ggml_type) t);
        if (n && name == n) return (ggml_type) t;
    }
    fprintf(stderr, "unknown cache type %s\n", name.c_str());
    exit(2);
}

void fail(const char * what) {
    printf("%s\n", Obj().str("error", what).done().c_str());
    exit(1);
}

}  // namespace

int main(int argc, char ** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL.gguf [key=value ...]\n", argv[0]);
        return 2;
    }
    std::map<std::string, std::string> args;
    for (int i = 2; i < argc; ++i) {
        const char * eq = strchr(argv[i], '=');
        if (!eq) {
            fprintf(stderr, "not key=value: %s\n", argv[i]);
            return 2;
        }
        args[std::string(argv[i], (size_t) (eq - argv[i]))] = eq + 1;
    }
    auto num = [&](const char * k, long long d) { return args.count(k) ? atoll(args[k].c_str()) : d; };
    auto text = [&](const char * k, const char * d) { return args.count(k) ? args[k] : std::string(d); };

    const std::string rss_start = rss();
    llama_log_set([](ggml_log_level, const char * t, void *) { fputs(t, stderr); }, nullptr);
    const char * env_dir = getenv("GGML_BACKEND_DIR");
    const std::string backend_dir = text("backend_dir", env_dir ? env_dir : "");
    if (backend_dir.empty()) ggml_backend_load_all();
    else ggml_backend_load_all_from_path(backend_dir.c_str());
    llama_backend_init();
    const std::string rss_backend = rss();

    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.load_mode = num("mmap", 0) ? LLAMA_LOAD_MODE_MMAP : LLAMA_LOAD_MODE_NONE;
    mp.no_alloc = num("no_alloc", 0) != 0;
    const bool mtp_ctx = num("mtp_ctx", 0) != 0;
    const bool mtp = num("mtp", 0) != 0 || mtp_ctx;
    mp.load_mtp = mtp;
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) fail("model load failed");
    const std::string rss_model = rss();

    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = num("n_ctx", 2048);
    cp.n_seq_max = num("n_seq", 1);
    cp.n_batch = num("n_batch", 2048);
    cp.n_ubatch = num("n_ubatch", 512);
    cp.n_rs_seq = num("n_rs_seq", 0);
    const long long outputs_max = num("outputs_max", 0);
    cp.n_outputs_max = (uint32_t) outputs_max;
    cp.n_threads = cp.n_threads_batch = num("threads", 2);
    cp.type_k = type_named(text("type_k", "f16"));
    cp.type_v = type_named(text("type_v", "f16"));
    const std::string fa = text("fa", "auto");
    cp.flash_attn_type = fa == "on"    ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                         : fa == "off" ? LLAMA_FLASH_ATTN_TYPE_DISABLED
                                       : LLAMA_FLASH_ATTN_TYPE_AUTO;
    cp.kv_unified = num("unified", 0) != 0;
    cp.swa_full = num("swa_full", 0) != 0;
    cp.no_perf = true;
    const bool embeddings = num("embeddings", 0) != 0;
    cp.embeddings = embeddings;
    const std::string pooling = text("pooling", "");
    if (!pooling.empty()) {
        const std::map<std::string, enum llama_pooling_type> poolings = {
            {"none", LLAMA_POOLING_TYPE_NONE}, {"mean", LLAMA_POOLING_TYPE_MEAN}, {"cls", LLAMA_POOLING_TYPE_CLS},
            {"last", LLAMA_POOLING_TYPE_LAST}, {"rank", LLAMA_POOLING_TYPE_RANK}};
        if (!poolings.count(pooling)) fail("unknown pooling type");
        cp.pooling_type = poolings.at(pooling);
    }
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) fail("context init failed");
    const std::string rss_ctx = rss();
    if (mtp) llama_set_embeddings_nextn(ctx, true, /*masked*/ false);

    char desc[256];
    llama_model_desc(model, desc, sizeof desc);
    const auto & c = ctx->cparams;
    Obj out;
    out.str("system_info", llama_print_system_info())
        .str("model_desc", desc)
        .num("n_params", (long long) llama_model_n_params(model))
        .num("model_size_bytes", (long long) llama_model_size(model))
        .raw("model_buffers", per_buffer_type(model->memory_breakdown()))
        .raw("cparams", Obj().num("n_ctx", c.n_ctx)
                             .num("n_ctx_seq", c.n_ctx_seq)
                             .num("n_seq_max", c.n_seq_max)
                             .num("n_batch", c.n_batch)
                             .num("n_ubatch", c.n_ubatch)
                             .num("n_outputs_max", c.n_outputs_max)
                             .num("flash_attn", c.flash_attn)
                             .num("kv_unified", c.kv_unified)
                             .num("embeddings", c.embeddings)
                             .num("pooling_type", (long long) c.pooling_type)
                             .done());

    add_memory(out, ctx);

    const ggml_backend_buffer_t output = ctx->buf_output.get();
    out.raw("breakdown", breakdown(ctx))
        .num("output_buffer_bytes", output ? (long long) ggml_backend_buffer_get_size(output) : 0)
        .str("output_buffer_type", output ? ggml_backend_buffer_name(output) : "")
        .raw("rss_start", rss_start)
        .raw("rss_after_backend", rss_backend)
        .raw("rss_after_model", rss_model)
        .raw("rss_after_ctx", rss_ctx)
        .num("no_alloc", mp.no_alloc)
        .num("mtp", mtp);
    if (mtp_ctx) out.num("mtp_ctx", 1);
    const long long verify = num("verify", -1);
    if (verify >= 0) out.num("verify", verify);
    if (outputs_max > 0) out.num("outputs_max", outputs_max);
    if (embeddings) out.num("embeddings", 1);
    if (!pooling.empty()) out.str("pooling", pooling);

    const bool graph = num("graph", 0) != 0 && !mp.no_alloc;
    if (graph) out.raw("graph", graph_nodes(ctx));
    // Decoding a few tokens touches the compute buffer's pages (real allocation only).
    std::vector<llama_token> warmup;
    if (num("warmup", 0) != 0) {
        const llama_vocab * vocab = llama_model_get_vocab(model);
        if (llama_vocab_bos(vocab) != LLAMA_TOKEN_NULL) warmup.push_back(llama_vocab_bos(vocab));
        if (llama_vocab_eos(vocab) != LLAMA_TOKEN_NULL) warmup.push_back(llama_vocab_eos(vocab));
        if (warmup.empty()) warmup.push_back(0);
    }
    const long long asked = warmup.empty() ? num("decode", 0) : (long long) warmup.size();
    const long long n_decode = mp.no_alloc || graph ? 0 : std::min<long long>(asked, c.n_batch);
    if (n_decode > 0) {
        const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
        // a verification batch: sequence s's 1 + verify tokens at positions 0..verify, all with logits
        const long long per_seq = verify >= 0 ? 1 + verify : n_decode;
        const long long n_tokens = verify >= 0 ? std::min<long long>(c.n_seq_max * per_seq, c.n_batch) : n_decode;
        llama_batch batch = llama_batch_init((int) n_tokens, 0, 1);
        for (int i = 0; i < n_tokens; ++i) {
            batch.token[i] = warmup.empty() ? 300 + (i * 7) % (n_vocab - 300) : warmup[i];
            batch.pos[i] = (llama_pos) (i % per_seq);
            batch.n_seq_id[i] = 1;
            batch.seq_id[i][0] = (llama_seq_id) (i / per_seq);
            batch.logits[i] = verify >= 0 || embeddings || i == n_tokens - 1;  // pooled embeddings: every token
        }
        batch.n_tokens = (int) n_tokens;
        const int rc = llama_decode(ctx, batch);
        llama_batch_free(batch);
        const ggml_backend_buffer_t output_after = ctx->buf_output.get();
        out.num("decode_tokens", n_tokens).num("decode_rc", rc).raw("rss_after_decode", rss()).raw("breakdown_after_decode", breakdown(ctx))
            .num("output_buffer_bytes_after_decode", output_after ? (long long) ggml_backend_buffer_get_size(output_after) : 0);
    }
    const long long state_tokens = mp.no_alloc || graph || n_decode > 0 ? 0 : num("state_tokens", 0);
    if (state_tokens > 0) {
        const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
        const llama_seq_id seq = (llama_seq_id) num("state_seq", 0);
        int rc = 0;
        for (long long done = 0; done < state_tokens && rc == 0;) {
            const int n = (int) std::min<long long>(state_tokens - done, c.n_batch);
            llama_batch batch = llama_batch_init(n, 0, 1);
            for (int i = 0; i < n; ++i) {
                batch.token[i] = 300 + ((done + i) * 7) % (n_vocab - 300);
                batch.pos[i] = (llama_pos) (done + i);
                batch.n_seq_id[i] = 1;
                batch.seq_id[i][0] = seq;
                batch.logits[i] = i == n - 1;
            }
            batch.n_tokens = n;
            rc = llama_decode(ctx, batch);
            llama_batch_free(batch);
            done += n;
        }
        out.num("state_tokens", state_tokens)
            .num("state_seq", seq)
            .num("state_rc", rc)
            .num("state_seq_bytes", (long long) llama_state_seq_get_size(ctx, seq))
            .num("state_seq_partial_bytes",
                 (long long) llama_state_seq_get_size_ext(ctx, seq, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY));
    }
    // the MTP draft context's parameters from the server's (`base`), as common_speculative_init_result makes them
    // from common_base_params_to_speculative's: ctx_type MTP, no rollback snapshots, the draft's own cache types
    // (--cache-type-k-draft/-v-draft, default f16), one output a sequence (n_outputs_max n_parallel,
    // n_outputs_max_per_seq 1), no embeddings, pooling unspecified
    const auto draft_params = [&](llama_context_params base) {
        base.ctx_type = LLAMA_CONTEXT_TYPE_MTP;
        base.n_rs_seq = 0;
        base.type_k = type_named(text("type_k_draft", "f16"));
        base.type_v = type_named(text("type_v_draft", "f16"));
        base.n_outputs_max = cp.n_seq_max;
        base.n_outputs_max_per_seq = 1;
        base.embeddings = false;
        base.pooling_type = LLAMA_POOLING_TYPE_UNSPECIFIED;
        return base;
    };
    const long long fit_used = num("fit_used", 0);
    if (fit_used > 0) {
        size_t host_free = 0, host_total = 0;
        ggml_backend_dev_memory(ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU), &host_free, &host_total);
        std::vector<float> split(llama_max_devices(), 0.0f);
        std::vector<llama_model_tensor_buft_override> overrides(llama_max_tensor_buft_overrides());
        std::vector<size_t> margins(llama_max_devices(), host_total - (size_t) fit_used);
        llama_model_params fmp = llama_model_default_params();
        fmp.load_mtp = mtp;
        llama_context_params fcp = cp;
        fcp.n_ctx = 0;
        // with mtp_ctx=1, common_init_result's fit beside the MTP draft context (common_fit_extra_model on the
        // target's weights: shares_model), whose context it sizes at each n_ctx the fitter tries
        llama_model_params dmp = fmp;
        llama_context_params dfp = draft_params(fcp);
        const common_fit_extra_model extra = {argv[1], &dmp, &dfp, true};
        const int status = common_fit_params(argv[1], &fmp, &fcp, split.data(), overrides.data(), margins.data(),
                                             (uint32_t) num("fit_ctx", 4096), mtp_ctx ? &extra : nullptr,
                                             GGML_LOG_LEVEL_INFO);
        out.num("fit_used", fit_used).num("fit_host_total", (long long) host_total).num("fit_status", status)
            .num("fit_n_ctx", fcp.n_ctx);
    }
    llama_context * ctx_dft = nullptr;
    if (mtp_ctx) {
        // llama-server's MTP draft context (common_speculative_init_result): the server's context parameters with
        // ctx_type MTP, the target's n_ctx, no rollback snapshots, ctx_other the target; made on the target's
        // model after the target's context, its log silenced until it is freed (the log parser reads the target's lines only)
        llama_context_params dp = draft_params(cp);
        dp.n_ctx = llama_n_ctx(ctx);
        dp.ctx_other = ctx;
        llama_log_set([](ggml_log_level, const char *, void *) {}, nullptr);
        ctx_dft = llama_init_from_model(model, dp);
        Obj d;
        if (!ctx_dft) {
            d.str("error", "draft context init failed");
        } else {
            // common_speculative_impl_draft_mtp's constructor: with draft.backend_sampling (on by default) each
            // sequence's top-k(10) sampler chain offloaded to the backend (llama_set_sampler: a re-reserve is due),
            // then the draft keeps masked nextn embeddings
            if (num("draft_sampling", 1) != 0) {
                for (llama_seq_id seq = 0; seq < (llama_seq_id) cp.n_seq_max; ++seq) {
                    llama_sampler * chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
                    llama_sampler_chain_add(chain, llama_sampler_init_top_k(10));
                    if (!llama_set_sampler(ctx_dft, seq, chain)) llama_sampler_free(chain);
                }
                d.num("draft_sampling", (long long) ctx_dft->sampling.samplers.size());
                if (ctx_dft->sched_need_reserve) ctx_dft->sched_reserve();  // what the next decode would reserve
            }
            llama_set_embeddings_nextn(ctx_dft, true, /*masked*/ true);
            const auto & dc = ctx_dft->cparams;
            d.str("type_k", ggml_type_name(dp.type_k)).str("type_v", ggml_type_name(dp.type_v));
            d.raw("cparams", Obj().num("n_ctx", dc.n_ctx).num("n_ctx_seq", dc.n_ctx_seq).num("n_seq_max", dc.n_seq_max)
                                  .num("n_batch", dc.n_batch).num("n_ubatch", dc.n_ubatch)
                                  .num("flash_attn", dc.flash_attn).num("kv_unified", dc.kv_unified)
                                  .num("n_outputs_max", dc.n_outputs_max).done());
            add_memory(d, ctx_dft);
            d.raw("breakdown", breakdown(ctx_dft)).num("output_buffer_bytes", output_bytes(ctx_dft))
                .raw("rss_after_ctx", rss());
            if (graph) d.raw("graph", graph_nodes(ctx_dft));
            if (!mp.no_alloc && !graph && num("decode", 0) > 0) {
                // a draft step: each sequence's last token with its target hidden state, with logits
                const int n_embd = llama_model_n_embd_out(model);
                const int n_tokens = (int) dc.n_seq_max;
                llama_batch batch = llama_batch_init(n_tokens, n_embd, 1);
                batch.token = (llama_token *) malloc(sizeof(llama_token) * n_tokens);
                for (int i = 0; i < n_tokens; ++i) {
                    batch.token[i] = 300 + i;
                    batch.pos[i] = 0;
                    batch.n_seq_id[i] = 1;
                    batch.seq_id[i][0] = (llama_seq_id) i;
                    batch.logits[i] = 1;
                }
                std::fill(batch.embd, batch.embd + (size_t) n_tokens * n_embd, 0.01f);
                batch.n_tokens = n_tokens;
                const int rc = llama_decode(ctx_dft, batch);
                llama_batch_free(batch);  // frees token too
                d.num("decode_tokens", n_tokens).num("decode_rc", rc).raw("rss_after_decode", rss())
                    .raw("breakdown_after_decode", breakdown(ctx_dft))
                    .num("output_buffer_bytes_after_decode", output_bytes(ctx_dft));
            }
        }
        out.raw("mtp_ctx", d.done());
    }
    printf("%s\n", out.done().c_str());
    fflush(stdout);
    llama_free(ctx);
    if (ctx_dft) llama_free(ctx_dft);
    llama_log_set([](ggml_log_level, const char * t, void *) { fputs(t, stderr); }, nullptr);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
