/* exercises/auto_wrap.c — graded exercise: the auto-wrap policy.
 *
 * Write the body. `make exercise EX=auto_wrap` compiles fsdp.c with this
 * function in place of its own (fsdp.c, section 1) and grades it: the unit
 * table must equal the reference's for several --min-params, and training
 * must equal the reference on 1..4 ranks, for the byte MLP and for GPT-2.
 *
 * The task: PyTorch's size_based_auto_wrap_policy(min_num_params).
 * autowrap_visit(m, module, min_params) visits `module`'s subtree in
 * post-order (children first, m->modules[module].children[0 .. n_children))
 * and returns the number of parameters in the subtree that no unit below
 * has claimed. A module becomes a unit (set its .unit = 1; autowrap_number
 * numbers the units afterwards) when that remainder is >= min_params, and
 * then it claims them all: return 0. Three exceptions: the root (parent < 0)
 * is never marked here (it always becomes unit 0 and takes what is left),
 * an nn.ModuleList (is_module_list) is never wrapped, and neither is a
 * module that holds a tied weight (holds_tied: GPT-2's transformer and its
 * wte, whose weight lm_head also multiplies by, in the root's unit; wrapped
 * apart, lm_head would read a weight already freed).
 * A module's own parameters are m->params[mod->params[i]].numel, i <
 * mod->n_params.
 */
static long autowrap_visit(Model *m, int module, long min_params) {
    /* TODO: recurse into the children, add this module's parameters, decide */
    (void)m;
    (void)module;
    (void)min_params;
    return 0;
}
