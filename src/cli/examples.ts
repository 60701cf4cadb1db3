/**
 * The "Examples" block that ends each command's --help: two or three real commands, most of them on
 * the example model and data in fixtures/, which ship with the package (node_modules/model-opt/
 * fixtures/ when installed). test/cli/help-examples.test.ts checks every flag and fixture they name.
 * May import nothing.
 */

/** Text for `command.addHelpText('after', ...)`: one `  $ command` line per example. */
export function helpExamples(...commands: string[]): string {
  return ['', 'Examples (fixtures/ is in the repository and in node_modules/model-opt/):', ...commands.map((c) => `  $ ${c}`)].join('\n');
}
