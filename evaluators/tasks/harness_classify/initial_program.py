"""A harness around an LLM that sorts short texts by topic (the built-in harness_classify task).

classify(text, labels, examples, llm) runs once per case: it builds the chat messages, asks the
task model (llm(messages) returns the answer's text) and reads a label out of the answer.
"""


# EVOLVE-BLOCK-START
EXAMPLES_PER_LABEL = 1  # labelled examples shown to the model, per label
TEXT_WORDS = 4  # words of the text sent to the model (the rest is cut, to save tokens)
LABEL_ONLY = False  # ask the model to answer with the label alone


def build_messages(text, labels, examples):
    lines = ["Labels: " + ", ".join(labels)]
    shown = {}
    for example, label in examples:
        if shown.get(label, 0) < EXAMPLES_PER_LABEL:
            shown[label] = shown.get(label, 0) + 1
            lines.append(f"Example: {example} => {label}")
    if LABEL_ONLY:
        lines.append("Reply with the label only.")
    lines.append("Text: " + " ".join(text.split()[:TEXT_WORDS]))
    return [{"role": "system", "content": "You sort short texts by topic."},
            {"role": "user", "content": "\n".join(lines)}]


def parse_answer(answer, labels):
    lowered = answer.lower()
    for label in labels:
        if label in lowered:
            return label
    return labels[0]


def classify(text, labels, examples, llm):
    return parse_answer(llm(build_messages(text, labels, examples)), labels)
# EVOLVE-BLOCK-END
