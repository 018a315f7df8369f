import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import pkg from '../../package.json' with { type: 'json' };
import tsconfig from '../../tsconfig.json' with { type: 'json' };

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** The source file of each entry point of the exports map, as the tsconfig paths name it. */
const entries = Object.keys(pkg.exports)
  .filter((key) => key !== './package.json')
  .map((key) => {
    const specifier = `nodemailer-eml-api${key.slice(1)}`;
    const paths = tsconfig.compilerOptions.paths as Record<string, string[]>;
    return { specifier, file: `${ROOT}${paths[specifier]![0]!.slice(2)}` };
  });

describe('the public names', () => {
  it('each have TSDoc with an example, in every entry point', () => {
    const program = ts.createProgram(
      entries.map((e) => e.file),
      {
        module: ts.ModuleKind.NodeNext,
        moduleResolution: ts.ModuleResolutionKind.NodeNext,
        strict: true,
        skipLibCheck: true,
        noEmit: true,
        types: ['node'],
      },
    );
    const checker = program.getTypeChecker();
    const undocumented: string[] = [];
    for (const { specifier, file } of entries) {
      const module = checker.getSymbolAtLocation(program.getSourceFile(file)!)!;
      for (const name of checker.getExportsOfModule(module)) {
        const symbol = name.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(name) : name;
        const doc = ts.displayPartsToString(symbol.getDocumentationComment(checker)).trim();
        const example = symbol.getJsDocTags(checker).some((tag) => tag.name === 'example');
        if (!doc || !example)
          undocumented.push(`${specifier}: ${name.name}${doc ? '' : ' (no TSDoc)'}${example ? '' : ' (no @example)'}`);
      }
    }
    expect(undocumented).toEqual([]);
  }, 60_000);
});
