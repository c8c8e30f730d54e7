/* ============================================================================
 * model/activations.h — section 1 of fsdp.c, what the two models FSDP
 * wraps keep between their forward and their backward: the byte MLP's
 * (model/mlp.h) and GPT-2's (model/gpt2.h). The Trainer holds one of each
 * (only the chosen model's is allocated); their memory is booked as
 * activations in the ledger, which is all FSDP needs to know of them.
 *
 * May include core.h, fsdp.h, kernels/ and sim/ledger.h: what a forward
 * keeps, not how it computes; nothing of fsdp.c's.
 * ========================================================================== */
#ifndef FSDP_MODEL_ACTIVATIONS_H
#define FSDP_MODEL_ACTIVATIONS_H
#include "../kernels/layers.h" /* TokenRows */
#include "../sim/ledger.h"     /* token_rows_alloc books the batch's rows */

/* What the forward pass saves for the backward pass, and the gradient
 * scratch the backward pass flows through. B is this rank's batch. Every
 * activation but LayerNorm's statistics, attention's probabilities (or
 * lse) and the loss's lse and losses (float *, fp32 slots) is held as the
 * matmuls read it (void *), in backend.gemm_dtype: 16-bit values on a GPU
 * with 16-bit parameters, the residual stream and its gradient included,
 * since every kernel that reads them reads through load_as
 * (kernels/layers.h); a slice of one is element_at's. */
typedef struct {
    unsigned char *tokens;    /* (B, T) context bytes */
    int *targets;             /* (B) the byte that follows */
    TokenRows by_token;       /* the B*T context bytes grouped by byte */
    void *x_emb;              /* (B, T*C) concatenated embeddings: proj_in's input */
    void *h;                  /* (L+1, B, D) residual stream before each block */
    void *ln;                 /* (L, B, D) block norm outputs: fc1's input */
    float *ln_mean, *ln_rstd; /* (L, B) */
    void *fc1;                /* (L, B, 4D) fc1 outputs, before GELU: its input */
    void *act;                /* (L, B, 4D) GELU outputs: fc2's input */
    void *nf;                 /* (B, D) norm_f output: the head's input */
    float *nf_mean, *nf_rstd; /* (B) */
    void *logits;             /* (B, V) the head's output, the loss's input; backward
                               * writes their gradient over them */
    float *lse;               /* (B) log of each row's softmax denominator */
    float *losses;            /* (B) each sample's loss */
    void *d_h;                /* (B, D) the residual stream's gradient */
    void *d_nf, *d_ln;        /* (B, D) a LayerNorm's output gradient: its backward's input */
    void *d_act;              /* (B, 4D) fc2's input gradient: GELU's backward's input */
    void *d_fc1;              /* (B, 4D) fc1's output gradient (GELU's backward writes it) */
    void *d_emb;              /* (B, T*C) proj_in's input gradient: the embedding's */
} Activations;

/* GPT-2's (model/gpt2.h), B sequences of T tokens (BT rows of width D).
 * Per block: S = L blocks' worth, or one with activation checkpointing. */
typedef struct {
    int *tokens, *targets;        /* (B, T) each: the targets are the tokens shifted by one */
    TokenRows by_token;           /* the B*T tokens grouped by token, for wte's gradient */
    void *res;                    /* (L+1, BT, D) the residual stream before each block */
    void *ln1, *ln2;              /* (S, BT, D) ln_1, ln_2 outputs: c_attn's, c_fc's input */
    float *ln1_mean, *ln1_rstd;   /* (S, BT) */
    float *ln2_mean, *ln2_rstd;   /* (S, BT) */
    void *qkv;                    /* (S, BT, 3D) c_attn's output: attention's input */
    float *att;                   /* (S, B, H, T, T) attention probabilities P; with
                                   * --attention flash (S, B, H, T), each row's lse */
    void *atty;                   /* (S, BT, D) attention output, c_proj's input */
    void *res_mid;                /* (S, BT, D) residual after the attention branch */
    void *fc;                     /* (S, BT, 4D) c_fc's output: GELU's input */
    void *fc_gelu;                /* (S, BT, 4D) after GELU: mlp.c_proj's input */
    void *lnf;                    /* (BT, D) ln_f's output: lm_head's input */
    float *lnf_mean, *lnf_rstd;   /* (BT), (BT) */
    void *logits;                 /* (BT, V) lm_head's output, rows logits_stride(V)
                                   * apart, the loss's input; backward
                                   * writes their gradient over them */
    float *lse;                   /* (BT) log of each row's softmax denominator */
    float *losses;                /* (BT) */
    void *proj;                   /* (BT, D) a c_proj's output: the residual connection's input */
    void *d_res;                  /* (BT, D) the residual stream's gradient */
    void *d_x;                    /* (BT, D) a LayerNorm's output gradient: its backward's */
    void *d_atty;                 /* (BT, D) c_proj's input gradient: attention's backward's */
    void *d_qkv;                  /* (BT, 3D) c_attn's output gradient (attention's backward) */
    float *d_att;                 /* (B, H, T, T) dP; with flash (B, H, T), delta */
    void *d_fc;                   /* (BT, 4D) mlp.c_proj's input gradient, then c_fc's
                                   * output gradient: GELU's backward (or
                                   * cuBLASLt's DGELU) turns one into the other */
} Gpt2Activations;

/* A batch's TokenRows, booked as activations (the models' forwards fill it) */
static void token_rows_alloc(TokenRows *g, Ledger *l, long BT) {
    g->rows = (int *)ledger_alloc(l, MEM_ACTIVATIONS, (size_t)BT, sizeof(int), "the batch");
    g->end = (int *)ledger_alloc(l, MEM_ACTIVATIONS, (size_t)BT, sizeof(int), "the batch");
    g->token = (int *)ledger_alloc(l, MEM_ACTIVATIONS, (size_t)BT, sizeof(int), "the batch");
    g->distinct = 0;
}

#endif /* FSDP_MODEL_ACTIVATIONS_H */
