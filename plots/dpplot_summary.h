/* dpplot_summary.h: the text reports of a results directory.
 *
 * summary.txt keeps the layout users know from the PyTorch tooling (method, peak memory (MB),
 * average time (ms), memory/time; then each method's component breakdown), adds the runs left out
 * of the table (OOM and other failures) and any problems met while reading. summary.csv has one
 * row per results file; summary.md and summary.tex hold the table for READMEs and papers.
 * MB means MiB (2^20 bytes) throughout, as in the results files. Output is deterministic: the
 * same results give the same bytes. */
#ifndef DPPLOT_SUMMARY_H
#define DPPLOT_SUMMARY_H

#include <stdio.h>

#include "dpplot_results.h"
#include "dpplot_strlist.h"

/* Writes summary.txt's content to f; problems (may be NULL) are listed at the end.
 * 0 on success, -1 on a write error. */
int dpplot_summary_write_txt(const dpplot_results *rs, const dpplot_strlist *problems, FILE *f);
/* Writes summary.csv's content (RFC 4180, header row first) to f; 0, or -1 on a write error. */
int dpplot_summary_write_csv(const dpplot_results *rs, FILE *f);
/* Writes summary.md's content (a GitHub table) to f; 0, or -1 on a write error. */
int dpplot_summary_write_md(const dpplot_results *rs, FILE *f);
/* Writes summary.tex's content (a booktabs tabular) to f; 0, or -1 on a write error. */
int dpplot_summary_write_tex(const dpplot_results *rs, FILE *f);
/* Writes summary.txt, .csv, .md and .tex into out_dir; returns the number of files that could
 * not be written (each noted in `notes`). */
int dpplot_summary_write_all(const dpplot_results *rs, const dpplot_strlist *problems, const char *out_dir,
                             dpplot_strlist *notes);

#endif
