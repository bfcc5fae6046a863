/* sample.h — `ringmaster-worker sample` (run by `ringmaster sample`): text from a trained language
 * model (docs/models-and-data.md, "Exported models and ringmaster sample").
 *
 *   sample (--model FILE|DIR | --checkpoint DIR) (--prompt TEXT | --prompt-tokens 1,2,3)
 *          [--tokens N] [--temperature T] [--top-k K] [--seed S] [--threads N]
 *
 * --model reads an export (model.safetensors and the config.json beside it, worker/model/export.h);
 * --checkpoint the newest checkpoint of a checkpoint folder that has a manifest
 * (worker/checkpoint/manifest.h), else the folder's export/. The model is any family whose rows
 * are token windows (x: `context` int32 tokens a row, labels the same, the last unit's output
 * `context` x vocab logits): the family decides, this file names none.
 *
 * Generation: the window is the last `context` tokens (all of them while fewer), one forward pass
 * of one row per token, the logits of the window's last position; temperature 0 is greedy (the
 * first maximum), otherwise softmax(logits / T) over the top K (0: all) drawn with a generator
 * seeded by --seed, so a seed repeats its text. stdout gets the prompt and the N tokens and
 * nothing else: their bytes for --prompt (a byte model), their ids comma-separated and a newline
 * for --prompt-tokens; logs go to stderr.
 *
 * Returns the process exit status: 0, 1 (a file that cannot be read or does not fit), 2 (usage). */
#ifndef RM_WORKER_SAMPLE_H
#define RM_WORKER_SAMPLE_H

int rm_worker_sample_main(int argc, char **argv);

/* The newest checkpoint of dir (the highest step among its manifests, worker/checkpoint/manifest.h:
 * plain, sharded or pipeline-staged files alike, assembled whole) into m, initialized here on the
 * CPU kernels (rm_model_free is the caller's), logged as "WHO: checkpoint loaded"; *step (may be NULL) gets its step. Errors name flag
 * ("--checkpoint"); RM_ENOTFOUND (err unset) when dir holds no manifest. `ringmaster-worker
 * export` (worker/export_cmd.c) reads checkpoints through it too. */
#include <stdint.h>
#include "common/rm.h"
#include "worker/model/model.h"
int rm_ckpt_model_load(const char *who, const char *dir, const char *flag, rm_model *m, int64_t *step,
                       rm_err *err);
#endif
