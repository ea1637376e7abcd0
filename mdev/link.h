/* SPDX-License-Identifier: GPL-2.0-only */
/* link.h - the NTB client (ntb.c): one struct fp_link per NTB device. */
#ifndef FARPASS_LINK_H
#define FARPASS_LINK_H

struct fp_link;

int fp_ntb_init(void);
void fp_ntb_exit(void);

/* The link whose NTB PCI device is called @name; NULL if none. Caller holds fp_lock. */
struct fp_link *fp_link_find(const char *name);

/* window.c: the lender role's outbound window mmap. */
struct farpass_outbound_window;
struct file;
struct vm_area_struct;
int fp_win_describe(struct farpass_outbound_window *w);
int fp_win_mmap(struct file *file, struct vm_area_struct *vma);
void fp_win_link_teardown(struct fp_link *link);

#endif /* FARPASS_LINK_H */
